//! The JSON documents xtask reads and writes, typed: the slices of
//! gdrtrace's report and `doctor --json` it reads (docs/report-schema.md;
//! xtask builds the tracer, so it does not link it and mirrors only the
//! fields it uses), the rows `gdrtrace bench ...` prints, and `cargo xtask
//! bench`'s own `host.json`. A renamed field fails to parse, naming it,
//! where an untyped lookup would read null.
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The part of a gdrtrace report the benchmarks read.
#[derive(Deserialize)]
pub struct Report {
    #[serde(default)]
    pub operations: Vec<Operation>,
    pub loss: Loss,
}

#[derive(Deserialize)]
pub struct Operation {
    pub name: String,
    pub calls: u64,
}

#[derive(Deserialize)]
pub struct Loss {
    pub ringbuf_drops: u64,
    pub complete: bool,
}

/// The part of `gdrtrace doctor --json` the kernel matrix reads.
#[derive(Deserialize)]
pub struct Doctor {
    #[serde(default)]
    pub coverage: Vec<Coverage>,
}

/// One probe point's coverage row.
#[derive(Clone, Deserialize)]
pub struct Coverage {
    pub point: String,
    pub status: Status,
    #[serde(default)]
    pub via: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub tried: Vec<Attempt>,
}

#[derive(Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    Attached,
    Unavailable,
}

/// A strategy refused before the one that attached.
#[derive(Clone, Deserialize)]
pub struct Attempt {
    pub strategy: String,
    pub error: String,
}

/// The fields not named in a row `gdrtrace bench` printed, kept as they
/// came so `host.json` holds the whole row.
type Rest = Map<String, Value>;

/// `gdrtrace bench pipeline`.
#[derive(Serialize, Deserialize)]
pub struct PipelineRun {
    /// Calls per second asked for (0: unpaced).
    pub rate: u64,
    pub threads: u32,
    pub calls: u64,
    pub delivered: u64,
    pub ringbuf_drops: u64,
    pub events_per_s: f64,
    pub tracer_cpu_us_per_event: f64,
    #[serde(flatten)]
    pub rest: Rest,
}

/// `gdrtrace bench uprobe-hit`.
#[derive(Serialize, Deserialize)]
pub struct UprobeHit {
    pub mode: String,
    pub ns_per_hit: f64,
    pub ns_per_hit_min: f64,
    pub ns_per_hit_max: f64,
    pub unprobed_ns_per_call: f64,
    pub counted_calls: u64,
    #[serde(flatten)]
    pub rest: Rest,
}

/// `gdrtrace bench detach`.
#[derive(Serialize, Deserialize)]
pub struct Detach {
    pub mode: String,
    pub points: usize,
    pub links: usize,
    pub attach_ms: f64,
    pub close_ms: f64,
    #[serde(flatten)]
    pub rest: Rest,
}

/// `gdrtrace bench duty`.
#[derive(Serialize, Deserialize)]
pub struct Duty {
    pub collectives: String,
    pub link_mode: String,
    pub ratio_of_sums: f64,
    pub median_pair_ratio: f64,
    pub trapped_share: f64,
    pub probed_calls: u64,
    pub traps_per_s: f64,
    pub off_phases: u64,
    #[serde(flatten)]
    pub rest: Rest,
}

/// One measured quantity over interleaved rounds.
#[derive(Serialize, Deserialize)]
pub struct Ratios {
    pub untraced: Vec<f64>,
    pub traced: Vec<f64>,
    pub median_untraced: f64,
    pub median_traced: f64,
    pub ratio_of_medians: f64,
    pub median_of_ratios: f64,
}

#[derive(Serialize, Deserialize)]
pub struct PinChurn {
    pub iterations: u32,
    pub rounds: usize,
    pub wall_s: Ratios,
    pub cpu_s: Ratios,
    pub events_delivered: u64,
    pub ringbuf_drops: u64,
    pub expected_events: u64,
}

#[derive(Serialize, Deserialize)]
pub struct Pipeline {
    pub runs: Vec<PipelineRun>,
    pub best_lossless_events_per_s: f64,
}

#[derive(Serialize, Deserialize)]
pub struct AttachSigint {
    pub signal_to_report_ms: f64,
    pub signal_to_exit_ms: f64,
    pub ringbuf_drops: u64,
    pub complete: bool,
    /// The tracer's `closed ...` line.
    pub close: String,
}

#[derive(Serialize, Deserialize)]
pub struct RunExit {
    pub exit_to_report_ms: f64,
    pub exit_to_tracer_exit_ms: f64,
}

/// `target/bench/host.json`: each scenario, null where it was not run.
#[derive(Serialize, Deserialize)]
pub struct Host {
    pub machine: String,
    pub date: String,
    pub pin_churn: Option<PinChurn>,
    pub pipeline: Option<Pipeline>,
    pub detach: Option<Vec<Detach>>,
    pub uprobe_hit: Option<UprobeHit>,
    pub attach_sigint: Option<Vec<AttachSigint>>,
    pub run_exit: Option<Vec<RunExit>>,
    pub duty: Option<Vec<Duty>>,
    pub seconds: f64,
}
