//! `gdrtrace bench`'s subcommands and their arguments.
use std::path::PathBuf;

use clap::Subcommand;

use crate::units::parse_duration;

#[derive(Debug, Subcommand)]
pub enum Bench {
    /// Events per second the pipeline delivers: `drive syscalls` traced
    /// through a getppid tracepoint (ring buffer, wake-ups, decoding and
    /// aggregation), with every loss counted.
    Pipeline(BenchPipelineArgs),
    /// Attach and close N uprobe points (functions of this binary) as
    /// uprobe_multi links or, with --per-point, one link per point.
    Detach(BenchDetachArgs),
    /// What a probed collective costs per call: a stand-in with
    /// ncclAllReduce's arguments, probed as ncclAllReduce is (entry-only,
    /// summed in the kernel), against an identical unprobed function,
    /// interleaved.
    UprobeHit(BenchUprobeHitArgs),
    /// The trap cost the duty cycle's estimates correct for, measured as a
    /// trace measures it when it first samples (an entry-only probe and an
    /// entry and return pair on stand-ins in this process); prints the
    /// figures `GDRTRACE_TRAP_COST` takes.
    TrapCost(BenchTrapCostArgs),
    /// What probed collectives cost a job under a --collectives mode: a
    /// loop of calls with WORK of spin each (a collective's duration), to
    /// the probed stand-in and to an unprobed twin in alternating windows,
    /// while the tracing loop runs the duty cycle.
    Duty(BenchDutyArgs),
    /// What copies cost a job under `run`: `drive copy-loop` through the
    /// stand-in libcuda, untraced and traced in alternating rounds, with
    /// the report's copy counts (or estimates) and verdicts.
    Copies(BenchCopiesArgs),
    /// What the network probes cost a clean TCP job: `drive tcp` over
    /// loopback traced with the lifecycle and network probes against the
    /// same with the lifecycle probes only (the control, and its twin: an off/off pair), rounds interleaved.
    Network(BenchNetworkArgs),
}

#[derive(Debug, clap::Args)]
pub struct BenchNetworkArgs {
    /// Bytes each round's transfer sends (e.g. 512M).
    #[arg(long, default_value = "512M", value_parser = crate::units::parse_size)]
    pub bytes: u64,
    /// Bytes per send call.
    #[arg(long, default_value = "64K", value_parser = crate::units::parse_size)]
    pub chunk: u64,
    /// Interleaved rounds of three runs (network probes, control, the
    /// control's twin for an off/off ratio; order rotating).
    #[arg(long, default_value_t = 7)]
    pub rounds: u32,
}

#[derive(Debug, clap::Args)]
pub struct BenchCopiesArgs {
    /// The stand-in libcuda (`libcuda.so.1` built by the tests:
    /// target/standin/libcuda.so.1).
    #[arg(long)]
    pub lib: PathBuf,
    /// Copies each way per round.
    #[arg(long, default_value_t = 300_000)]
    pub copies: u64,
    /// Bytes per copy.
    #[arg(long, default_value_t = 8)]
    pub bytes: u64,
    /// Interleaved rounds (untraced and traced, order alternating).
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// `run --collectives` of the traced rounds.
    #[arg(long, default_value = "auto")]
    pub collectives: crate::sampling::Mode,
    /// Pause --pause-ms after every this many pairs (`drive copy-loop
    /// --burst`: the shape of torch's asynchronous copies with a
    /// synchronize every few; 0: a steady loop).
    #[arg(long, default_value_t = 0)]
    pub burst: u64,
    /// Milliseconds of each pause (--burst).
    #[arg(long, default_value_t = 0.0)]
    pub pause_ms: f64,
}

#[derive(Debug, clap::Args)]
pub struct BenchDutyArgs {
    /// The mode of the probed stand-in's row (as `run --collectives`).
    #[arg(long, default_value = "auto")]
    pub collectives: crate::sampling::Mode,
    /// Nanoseconds of spin per call before it (the collective's own time:
    /// an 8 KiB all-reduce on 2xH200 takes 20-36 us).
    #[arg(long, default_value_t = 20_000)]
    pub work_ns: u64,
    /// Length of each window (probed, then unprobed, alternating).
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    pub window: std::time::Duration,
    /// Window pairs.
    #[arg(long, default_value_t = 12)]
    pub pairs: u32,
}

#[derive(Debug, clap::Args)]
pub struct BenchUprobeHitArgs {
    /// Calls per round, to each function.
    #[arg(long, default_value_t = 1_000_000)]
    pub calls: u64,
    /// Interleaved rounds.
    #[arg(long, default_value_t = 9)]
    pub rounds: u32,
}

#[derive(Debug, clap::Args)]
pub struct BenchTrapCostArgs {
    /// Between calls, read this many KiB of a buffer (in the probed and the
    /// unprobed loop alike), as a job's own work evicts the trap path from
    /// the caches between its calls; 0: back to back, as a trace measures
    /// it. With it, the median of the rounds is printed too.
    #[arg(long, default_value_t = 0)]
    pub evict_kib: u64,
}

#[derive(Debug, clap::Args)]
pub struct BenchPipelineArgs {
    /// getppid calls in all.
    #[arg(long, default_value_t = 2_000_000)]
    pub calls: u64,
    /// Threads making them.
    #[arg(long, default_value_t = 1)]
    pub threads: u32,
    /// Calls per second in all (0: as fast as the threads go).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Event ring buffer size in bytes.
    #[arg(long, default_value_t = tracer_common::RINGBUF_BYTES as u64)]
    pub ringbuf_bytes: u64,
    /// Ring-buffer fill level (bytes) from which a record wakes the reader.
    #[arg(long, default_value_t = tracer_common::WAKEUP_BYTES as u64)]
    pub wakeup_bytes: u64,
}

#[derive(Debug, clap::Args)]
pub struct BenchDetachArgs {
    /// Probe points (distinct functions of this binary), each with an entry
    /// and a return probe.
    #[arg(long, default_value_t = 200)]
    pub points: usize,
    /// One perf-event link per point instead of uprobe_multi links.
    #[arg(long)]
    pub per_point: bool,
}
