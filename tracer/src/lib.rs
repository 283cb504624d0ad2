//! gdrtrace: an eBPF transport tracer for GPU communication.
//!
//! The data path reads top-down: `probes` (catalog + planner) → `events`
//! (ring buffer, decode) → `model` (memory-region registry) → `classify` →
//! `stats` → `report`, and reports → `compare` (baselines, regressions).
//! `drive` holds the workloads, `cmd` one module per subcommand, `serve`
//! the node agent (discovery, forgetting, Prometheus metrics), `top` the
//! live full-screen view.
// First, so that its printing macros (`out!`, `outln!`, `errln!`) are in
// scope in every module after it.
#[macro_use]
pub mod output;
pub mod calibrate;
pub mod clamp;
pub mod classify;
pub mod cli;
pub mod cmd;
pub mod compare;
pub mod counters;
pub mod drive;
pub mod error;
pub mod events;
pub mod explain;
#[cfg(test)]
pub mod fixtures;
pub mod host;
pub mod identity;
pub mod input;
pub mod intern;
pub mod job;
pub mod judge;
pub mod loader;
pub mod model;
pub mod probes;
pub mod progress;
pub mod recording;
pub mod report;
pub mod sampling;
pub mod serve;
pub mod session;
pub mod signals;
pub mod spawn;
pub mod stats;
pub mod top;
pub mod topo;
pub mod trace;
pub mod units;
pub mod version;

/// A function for uprobe self-tests (`doctor`): a stable, non-inlined target
/// in the tracer's own binary.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn gdrtrace_doctor_probe_target(x: u64) -> u64 {
    std::hint::black_box(x.wrapping_add(1))
}
