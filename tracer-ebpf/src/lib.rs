//! Empty library target: lets `tracer` declare a build-dependency on this
//! crate so cargo rebuilds the eBPF object when it changes (aya-template's
//! arrangement). The programs are the binary target in `main.rs`.
#![no_std]
