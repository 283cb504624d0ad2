//! Tests of the tracer crate from outside it: the layering and probe
//! declarations of the source tree, golden outputs and recorded replays.
//! One binary, a module per area.
mod circles;
mod golden;
mod layers;
mod nccl_plugins;
mod probe_declarations;
mod replays;
