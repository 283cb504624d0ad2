//! Workloads the tracer runs and observes (`gdrtrace drive ...`). Each prints
//! its own count of what it did, so a test can hold the tracer to it.
pub mod copy_loop;
pub mod cuda_copy;
pub mod gds;
pub mod nccl;
pub mod nixl;
pub mod pin_churn;
pub mod syscalls;
pub mod ucx;
pub mod verbs;
