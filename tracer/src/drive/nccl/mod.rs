//! `gdrtrace drive nccl`: NCCL collectives across the local GPUs, one
//! process per GPU, the way training jobs run them.
//!
//! The parent creates the NCCL unique id (`ncclGetUniqueId`, which also
//! starts the bootstrap root in the parent), then starts itself once per
//! rank (`drive nccl --rank R --nranks N --id HEX --result FILE ...`, hidden
//! options) with the transport environment of the chosen `--mode`. Each
//! rank binds GPU R, joins the communicator (`ncclCommInitRank`), warms up,
//! runs the size sweep (or loops it for `--duration`), and writes its
//! measurements as JSON to FILE. The parent waits for all ranks, stops the
//! others when one fails, and prints the combined summary.
//!
//! Bandwidths follow nccl-tests (doc/PERFORMANCE.md): algbw = S / t, where
//! S is the buffer size (all-reduce) or the gathered size (all-gather);
//! busbw = algbw * 2(n-1)/n for all-reduce and algbw * (n-1)/n for
//! all-gather.
mod ffi;
mod parent;
mod rank;

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use serde::{Deserialize, Serialize};

use super::cuda_copy::cu::CuError;
use crate::units::{SizeList, parse_size, parse_sizes};
use ffi::NcclFfiError;
pub use parent::run;
pub use rank::run_rank;

/// Default sizes of the sweep.
pub const DEFAULT_NCCL_SIZES: &str = "8K,64K,1M,16M,256M";
/// Bytes the default iteration count aims at per size.
const TARGET_BYTES_PER_SIZE: u64 = 1 << 30;
const MIN_DEFAULT_ITERS: u64 = 10;
const MAX_DEFAULT_ITERS: u64 = 1000;
/// Data collectives between two stop checks in `--duration` mode (single
/// size; a sweep checks once per pass).
const DURATION_BATCH: usize = 10;
/// Elements read back to check the result.
const VERIFY_ELEMS: usize = 1 << 16;

/// Errors of `drive nccl`, one line each.
#[derive(Debug, thiserror::Error)]
pub enum NcclError {
    #[error(transparent)]
    Cuda(#[from] CuError),
    #[error(transparent)]
    Nccl(#[from] NcclFfiError),
    #[error("nccl: {0}")]
    Usage(String),
    #[error("nccl: {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("nccl: rank {rank} failed: {msg}")]
    Rank { rank: usize, msg: String },
    #[error("nccl: ranks still running after {secs:.0} s (--timeout); stopped them")]
    Timeout { secs: f64 },
    #[error("nccl: rank {rank}: {msg}")]
    Verify { rank: usize, msg: String },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> NcclError {
    let what = what.into();
    move |source| NcclError::Io { what, source }
}

/// Collective to run.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NcclOp {
    /// ncclAllReduce (sum of float32).
    AllReduce,
    /// ncclAllGather (float32).
    AllGather,
}

impl NcclOp {
    pub fn name(self) -> &'static str {
        match self {
            NcclOp::AllReduce => "all-reduce",
            NcclOp::AllGather => "all-gather",
        }
    }

    /// The exported NCCL function each data call goes through.
    pub fn function(self) -> &'static str {
        match self {
            NcclOp::AllReduce => "ncclAllReduce",
            NcclOp::AllGather => "ncclAllGather",
        }
    }
}

impl std::fmt::Display for NcclOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Transports NCCL may use.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NcclMode {
    /// NCCL's choice (sets nothing beyond NCCL_NVLS_ENABLE=0).
    Auto,
    /// NCCL_P2P_DISABLE=1: no direct GPU-to-GPU transport.
    NoP2p,
    /// NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1: the network transport.
    NoP2pNoShm,
}

impl NcclMode {
    pub fn name(self) -> &'static str {
        match self {
            NcclMode::Auto => "auto",
            NcclMode::NoP2p => "no-p2p",
            NcclMode::NoP2pNoShm => "no-p2p-no-shm",
        }
    }

    /// Environment the parent sets on every rank. NVLink SHARP (NVLS) is
    /// always off: the GPU hosts here require it.
    pub fn env(self) -> Vec<(&'static str, &'static str)> {
        let mut v = vec![("NCCL_NVLS_ENABLE", "0")];
        match self {
            NcclMode::Auto => {}
            NcclMode::NoP2p => v.push(("NCCL_P2P_DISABLE", "1")),
            NcclMode::NoP2pNoShm => {
                v.push(("NCCL_P2P_DISABLE", "1"));
                v.push(("NCCL_SHM_DISABLE", "1"));
            }
        }
        v
    }
}

impl std::fmt::Display for NcclMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Options of `gdrtrace drive nccl`.
#[derive(clap::Args, Clone, Debug)]
pub struct NcclOpts {
    /// Collective to run.
    #[arg(long, value_enum, default_value_t = NcclOp::AllReduce)]
    pub op: NcclOp,
    /// Transports NCCL may use. Every mode sets NCCL_NVLS_ENABLE=0 on the ranks.
    #[arg(long, value_enum, default_value_t = NcclMode::Auto)]
    pub mode: NcclMode,
    /// Sizes to sweep, comma-separated; K, M and G are powers of 1024. For
    /// all-gather a size is the gathered total (as in nccl-tests).
    #[arg(long, value_name = "SIZE,...", value_parser = parse_sizes, default_value = DEFAULT_NCCL_SIZES)]
    pub sizes: SizeList,
    /// One size instead of the sweep.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, conflicts_with = "sizes")]
    pub size: Option<u64>,
    /// Timed calls per size (default: about 1 GiB per size, 10 to 1000).
    #[arg(long, value_name = "N")]
    pub iters: Option<u64>,
    /// Untimed calls per size before timing (counted in calls).
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub warmup: u64,
    /// Loop the sweep (or --size) for this long instead, one synchronised
    /// call per iteration, printing `nccl: iter=I size=S time_us=T` (rank 0).
    #[arg(long, value_name = "DURATION", value_parser = crate::units::parse_duration)]
    pub duration: Option<Duration>,
    /// Ranks, one GPU each (default: every visible GPU; with --hosts N,
    /// N times that).
    #[arg(long, value_name = "N")]
    pub nranks: Option<usize>,
    /// Place the ranks on N emulated hosts: rank r runs on host
    /// r / (nranks / N) with NCCL_HOSTID=gdrtrace-emu-<host>, on GPU r % GPUs.
    /// Ranks with different NCCL_HOSTID are different hosts to NCCL, which
    /// then connects them only through its network (NET/IB, or NET/Socket
    /// without an RDMA NIC), as between nodes; ranks of different hosts may
    /// share a GPU. 1: no NCCL_HOSTID is set.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub hosts: usize,
    /// Stop the ranks and fail if they have not finished after this long
    /// (default: 10m, or --duration plus 5m).
    #[arg(long, value_name = "DURATION", value_parser = crate::units::parse_duration)]
    pub timeout: Option<Duration>,
    /// Also write the combined report as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
    /// (internal) This process is rank R of a run started by the parent.
    #[arg(long, hide = true, requires_all = ["id", "result", "nranks"])]
    pub rank: Option<usize>,
    /// (internal) The NCCL unique id, 256 hex digits.
    #[arg(long, hide = true)]
    pub id: Option<String>,
    /// (internal) Where the rank writes its JSON result.
    #[arg(long, hide = true)]
    pub result: Option<PathBuf>,
}

impl Default for NcclOpts {
    fn default() -> Self {
        Self {
            op: NcclOp::AllReduce,
            mode: NcclMode::Auto,
            sizes: parse_sizes(DEFAULT_NCCL_SIZES).unwrap_or(SizeList(vec![8192])),
            size: None,
            iters: None,
            warmup: 5,
            duration: None,
            nranks: None,
            hosts: 1,
            timeout: None,
            summary: None,
            rank: None,
            id: None,
            result: None,
        }
    }
}

impl NcclOpts {
    /// Whether this process is a rank started by the parent.
    pub fn is_rank(&self) -> bool {
        self.rank.is_some()
    }

    fn size_list(&self) -> Vec<u64> {
        match self.size {
            Some(s) => vec![s],
            None => self.sizes.0.clone(),
        }
    }
}

/// The NCCL_HOSTID of emulated host `host`.
pub fn emulated_host_id(host: usize) -> String {
    format!("gdrtrace-emu-{host}")
}

/// Where the ranks of a run go: how many, and each rank's emulated host
/// (None with one host: the machine as it is) and GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub nranks: usize,
    pub hosts: usize,
    pub gpus: usize,
}

impl Placement {
    /// Checks `--nranks`/`--hosts` against the visible GPUs (`gpus`).
    pub fn new(nranks: Option<usize>, hosts: usize, gpus: usize) -> Result<Placement, NcclError> {
        if hosts == 0 {
            return Err(NcclError::Usage("--hosts must be at least 1".into()));
        }
        let nranks = nranks.unwrap_or(gpus * hosts);
        if hosts == 1 && nranks > gpus {
            return Err(NcclError::Usage(format!(
                "--nranks {nranks}: only {gpus} GPU(s) visible (one rank per GPU; --hosts N places ranks of N emulated hosts on shared GPUs)"
            )));
        }
        if !nranks.is_multiple_of(hosts) || nranks < hosts {
            return Err(NcclError::Usage(format!(
                "--nranks {nranks} is not a multiple of --hosts {hosts} (the same number of ranks on every host)"
            )));
        }
        if nranks / hosts > gpus {
            return Err(NcclError::Usage(format!(
                "--nranks {nranks} on --hosts {hosts}: {} ranks per host but only {gpus} GPU(s) visible (NCCL refuses two ranks of one host on one GPU)",
                nranks / hosts
            )));
        }
        Ok(Placement { nranks, hosts, gpus })
    }

    /// Rank `r`'s emulated host id (None with one host) and GPU.
    pub fn of(&self, r: usize) -> (Option<String>, usize) {
        let host = (self.hosts > 1).then(|| emulated_host_id(r / (self.nranks / self.hosts)));
        (host, r % self.gpus.max(1))
    }
}

/// nccl-tests' bus-bandwidth factor: busbw = algbw * factor.
pub fn bus_factor(op: NcclOp, nranks: usize) -> f64 {
    if nranks == 0 {
        return 0.0;
    }
    let n = nranks as f64;
    match op {
        NcclOp::AllReduce => 2.0 * (n - 1.0) / n,
        NcclOp::AllGather => (n - 1.0) / n,
    }
}

/// Timed calls per size when `--iters` is not given.
pub fn default_iters(size: u64) -> u64 {
    (TARGET_BYTES_PER_SIZE / size.max(1)).clamp(MIN_DEFAULT_ITERS, MAX_DEFAULT_ITERS)
}

/// Element counts for a requested size `s` (bytes): (send elements, receive
/// elements, size actually used). float32 elements; all-gather splits `s`
/// evenly over the ranks (rounded down, at least one element per rank).
pub fn counts(op: NcclOp, size: u64, nranks: usize) -> (usize, usize, u64) {
    let elems = usize::try_from(size / 4).unwrap_or(usize::MAX).max(1);
    match op {
        NcclOp::AllReduce => (elems, elems, elems as u64 * 4),
        NcclOp::AllGather => {
            let n = nranks.max(1);
            let per = (elems / n).max(1);
            (per, per * n, (per * n) as u64 * 4)
        }
    }
}

/// `ncclUniqueId` as 256 hex digits.
pub fn id_to_hex(id: &[std::ffi::c_char; 128]) -> String {
    id.iter().map(|&c| format!("{:02x}", c as u8)).collect()
}

/// Inverse of [`id_to_hex`].
pub fn id_from_hex(s: &str) -> Result<[std::ffi::c_char; 128], String> {
    let s = s.trim();
    if s.len() != 256 || !s.is_ascii() {
        return Err(format!("NCCL id must be 256 hex digits, got {} characters", s.len()));
    }
    let mut out = [0 as std::ffi::c_char; 128];
    for (i, o) in out.iter_mut().enumerate() {
        let b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| format!("NCCL id is not hex: '{s}'"))?;
        *o = b as std::ffi::c_char;
    }
    Ok(out)
}

/// One size, as one rank measured it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RankSize {
    /// Bytes (all-gather: the gathered total).
    pub size: u64,
    /// Elements per call (all-gather: per rank).
    pub count: usize,
    pub warmup: u64,
    /// Timed calls (duration mode: iterations at this size).
    pub iters: u64,
    /// Mean time per call, microseconds.
    pub time_us: f64,
    pub min_time_us: f64,
    pub max_time_us: f64,
    /// Process CPU time over the timed calls, all of this rank's threads.
    pub cpu_s: f64,
}

/// What one rank did.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RankReport {
    pub rank: usize,
    pub pid: u32,
    /// Its emulated host (NCCL_HOSTID), with --hosts N > 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub device: usize,
    pub device_name: String,
    pub nccl_version: String,
    pub nccl_library: String,
    /// Collective calls, control calls included.
    pub calls: u64,
    pub calls_by_function: BTreeMap<String, u64>,
    /// ncclAllReduce calls made only to agree on stopping (duration mode).
    pub control_calls: u64,
    /// cuMemcpyDtoH_v2 calls (result check and stop flags).
    pub memcpy_calls: u64,
    pub sizes: Vec<RankSize>,
    pub duration_iters: u64,
    pub verified: bool,
    pub elapsed_s: f64,
}

/// A rank's result file.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RankOutcome {
    pub rank: usize,
    pub error: Option<String>,
    pub report: Option<RankReport>,
}

/// One size, combined over the ranks.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SizeResult {
    pub size: u64,
    pub count: usize,
    pub iters: u64,
    /// Mean over ranks of each rank's mean time per call.
    pub time_us: f64,
    /// The slowest rank's mean time per call.
    pub max_rank_time_us: f64,
    /// GB/s (1e9 bytes), from time_us.
    pub algbw: f64,
    pub busbw: f64,
    /// Mean over ranks of process CPU time per call, microseconds.
    pub cpu_us_per_call: f64,
    /// Sum over ranks of process CPU time over the timed calls.
    pub cpu_s: f64,
}

impl SizeResult {
    pub fn line(&self) -> String {
        format!(
            "nccl: size={} count={} iters={} time_us={:.2} algbw={:.3} busbw={:.3} cpu_us_per_call={:.2} cpu_ms={:.3}",
            self.size,
            self.count,
            self.iters,
            self.time_us,
            self.algbw,
            self.busbw,
            self.cpu_us_per_call,
            self.cpu_s * 1e3
        )
    }
}

/// The combined report of a run (its `--summary`, read back by `validate`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NcclReport {
    pub ranks: usize,
    /// Emulated hosts the ranks were placed on (1: none emulated).
    pub hosts: usize,
    pub mode: NcclMode,
    pub op: NcclOp,
    /// Environment set on the ranks.
    pub env: BTreeMap<String, String>,
    /// Collective calls per rank (data and control).
    pub calls: u64,
    pub calls_by_function: BTreeMap<String, u64>,
    pub control_calls: u64,
    pub duration_s: Option<f64>,
    pub duration_iters: u64,
    pub sizes: Vec<SizeResult>,
    pub verified: bool,
    pub nccl_version: String,
    pub nccl_library: String,
    pub parent_pid: u32,
    pub rank_reports: Vec<RankReport>,
    pub elapsed_s: f64,
}

impl NcclReport {
    /// First line `nccl: ranks=N mode=M op=O calls=C` (C: collective calls
    /// per rank), then one line per size, then details.
    pub fn summary_lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "nccl: ranks={} mode={} op={} calls={}",
            self.ranks, self.mode, self.op, self.calls
        )];
        out.extend(self.sizes.iter().map(SizeResult::line));
        let by_fn: Vec<String> = self.calls_by_function.iter().map(|(k, v)| format!("{k}={v}")).collect();
        out.push(format!(
            "nccl: calls by function per rank: {} (control all-reduces among them: {})",
            by_fn.join(" "),
            self.control_calls
        ));
        if self.hosts > 1 {
            let placed: Vec<String> = self
                .rank_reports
                .iter()
                .map(|r| format!("{}:{}/gpu{}", r.rank, r.host.as_deref().unwrap_or("-"), r.device))
                .collect();
            out.push(format!(
                "nccl: hosts={} emulated (NCCL_HOSTID per rank): {}",
                self.hosts,
                placed.join(" ")
            ));
        }
        let env: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let pids: Vec<String> = self.rank_reports.iter().map(|r| r.pid.to_string()).collect();
        out.push(format!(
            "nccl: verified={} nccl={} ({}) env: {} parent_pid={} rank_pids={} elapsed_s={:.3}",
            self.verified,
            self.nccl_version,
            self.nccl_library,
            env.join(" "),
            self.parent_pid,
            pids.join(","),
            self.elapsed_s
        ));
        out
    }
}

pub(crate) fn validate(opts: &NcclOpts) -> Result<(), NcclError> {
    if opts.iters == Some(0) {
        return Err(NcclError::Usage("--iters must be at least 1".into()));
    }
    if opts.nranks == Some(0) {
        return Err(NcclError::Usage("--nranks must be at least 1".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
