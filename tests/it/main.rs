//! The integration tests: one binary (cargo links it once), a module per
//! area. Tests that need root and BPF say `skipping: <reason>` elsewhere.
mod attach;
mod bench;
mod cli;
mod compare;
mod container;
mod copies;
mod deploy;
mod duty;
mod formats;
mod fuzz_readers;
mod habits;
mod host;
mod job;
mod nccl_log;
mod pin_churn;
mod progress;
mod record_replay;
mod robust;
mod serve;
mod timeline;
mod top;
mod topo;
mod trust;
mod uapi;
mod ucx;
mod verdicts;
