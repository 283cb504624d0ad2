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

use std::{
    collections::BTreeMap,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};

use super::cuda_copy::cu::{self, CuError, Device, DeviceBuf, Stream};
use crate::units::{SizeList, parse_size, parse_sizes};
use ffi::{NCCL_FLOAT32, NCCL_INT32, NCCL_MAX, NCCL_SUM, Nccl, NcclFfiError};

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
    /// Ranks, one GPU each (default: every visible GPU).
    #[arg(long, value_name = "N")]
    pub nranks: Option<usize>,
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
#[derive(Clone, Debug, Serialize)]
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

/// The combined report of a run.
#[derive(Clone, Debug, Serialize)]
pub struct NcclReport {
    pub ranks: usize,
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

fn validate(opts: &NcclOpts) -> Result<(), NcclError> {
    if opts.iters == Some(0) {
        return Err(NcclError::Usage("--iters must be at least 1".into()));
    }
    if opts.nranks == Some(0) {
        return Err(NcclError::Usage("--nranks must be at least 1".into()));
    }
    Ok(())
}

/// The parent: spawns one rank per GPU and combines their results.
pub fn run(opts: &NcclOpts) -> Result<NcclReport, NcclError> {
    let started = Instant::now();
    validate(opts)?;
    cu::init()?;
    let ndev = cu::device_count()?;
    if ndev == 0 {
        return Err(CuError::NoDevice.into());
    }
    let nranks = opts.nranks.unwrap_or(ndev);
    if nranks > ndev {
        return Err(NcclError::Usage(format!(
            "--nranks {nranks}: only {ndev} GPU(s) visible (one rank per GPU)"
        )));
    }
    let lib = Nccl::load()?;
    let nccl_version = lib.version()?;
    // The bootstrap root now runs in this process until it exits.
    let id = lib.unique_id()?;
    let hex = id_to_hex(&id.internal);

    let dir = std::env::temp_dir().join(format!(
        "gdrtrace-nccl-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    std::fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
    let outcome = spawn_and_wait(opts, nranks, &hex, &dir);
    let result = outcome.and_then(|outcomes| combine(opts, nranks, outcomes, &lib, nccl_version, started));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn rank_args(opts: &NcclOpts, rank: usize, nranks: usize, hex: &str, result: &Path) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "drive".into(),
        "nccl".into(),
        "--rank".into(),
        rank.to_string(),
        "--nranks".into(),
        nranks.to_string(),
        "--id".into(),
        hex.into(),
        "--result".into(),
        result.display().to_string(),
        "--op".into(),
        opts.op.name().into(),
        "--mode".into(),
        opts.mode.name().into(),
        "--warmup".into(),
        opts.warmup.to_string(),
    ];
    match opts.size {
        Some(s) => a.extend(["--size".into(), s.to_string()]),
        None => a.extend(["--sizes".into(), opts.sizes.to_string()]),
    }
    if let Some(i) = opts.iters {
        a.extend(["--iters".into(), i.to_string()]);
    }
    if let Some(d) = opts.duration {
        a.extend(["--duration".into(), format!("{}", d.as_secs_f64())]);
    }
    a
}

fn status_text(st: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "ended abnormally".into(),
    }
}

fn read_outcome(path: &Path) -> Option<RankOutcome> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

fn stop_all(children: &mut [(usize, Child)], done: &[bool]) {
    for (r, c) in children.iter_mut() {
        if !done[*r] {
            // Only processes this run started, by their own handle.
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn_and_wait(opts: &NcclOpts, nranks: usize, hex: &str, dir: &Path) -> Result<Vec<RankOutcome>, NcclError> {
    let exe = std::env::current_exe().map_err(io_err("locating the gdrtrace executable"))?;
    let mut children: Vec<(usize, Child)> = Vec::with_capacity(nranks);
    let mut done = vec![false; nranks];
    for rank in 0..nranks {
        let result = dir.join(format!("rank{rank}.json"));
        let mut cmd = Command::new(&exe);
        cmd.args(rank_args(opts, rank, nranks, hex, &result))
            .stdin(Stdio::null())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit());
        for (k, v) in opts.mode.env() {
            cmd.env(k, v);
        }
        match cmd.spawn() {
            Ok(c) => children.push((rank, c)),
            Err(e) => {
                stop_all(&mut children, &done);
                return Err(io_err(format!("starting rank {rank} ({})", exe.display()))(e));
            }
        }
    }
    let timeout = opts.timeout.unwrap_or_else(|| match opts.duration {
        Some(d) => d + Duration::from_secs(300),
        None => Duration::from_secs(600),
    });
    let deadline = Instant::now() + timeout;
    let mut failure: Option<(usize, ExitStatus)> = None;
    loop {
        for (r, c) in children.iter_mut() {
            if done[*r] {
                continue;
            }
            match c.try_wait() {
                Ok(Some(st)) => {
                    done[*r] = true;
                    if !st.success() && failure.is_none() {
                        failure = Some((*r, st));
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    let r = *r;
                    stop_all(&mut children, &done);
                    return Err(io_err(format!("waiting for rank {r}"))(e));
                }
            }
        }
        if let Some((rank, st)) = failure {
            stop_all(&mut children, &done);
            let msg = read_outcome(&dir.join(format!("rank{rank}.json")))
                .and_then(|o| o.error)
                .unwrap_or_else(|| status_text(&st));
            return Err(NcclError::Rank { rank, msg });
        }
        if done.iter().all(|d| *d) {
            break;
        }
        if Instant::now() >= deadline {
            stop_all(&mut children, &done);
            return Err(NcclError::Timeout {
                secs: timeout.as_secs_f64(),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut outcomes = Vec::with_capacity(nranks);
    for rank in 0..nranks {
        let o = read_outcome(&dir.join(format!("rank{rank}.json"))).ok_or_else(|| NcclError::Rank {
            rank,
            msg: "exited 0 but left no result".into(),
        })?;
        if let Some(msg) = o.error {
            return Err(NcclError::Rank { rank, msg });
        }
        outcomes.push(o);
    }
    Ok(outcomes)
}

fn combine(
    opts: &NcclOpts,
    nranks: usize,
    outcomes: Vec<RankOutcome>,
    lib: &Nccl,
    nccl_version: String,
    started: Instant,
) -> Result<NcclReport, NcclError> {
    let reports: Vec<RankReport> = outcomes.into_iter().filter_map(|o| o.report).collect();
    let Some(first) = reports.first() else {
        return Err(NcclError::Usage("no rank reported".into()));
    };
    if let Some(r) = reports.iter().find(|r| r.calls != first.calls) {
        return Err(NcclError::Rank {
            rank: r.rank,
            msg: format!(
                "made {} collective calls, rank {} made {}",
                r.calls, first.rank, first.calls
            ),
        });
    }
    let factor = bus_factor(opts.op, nranks);
    let mut sizes = Vec::new();
    for (i, s0) in first.sizes.iter().enumerate() {
        let per: Vec<&RankSize> = reports.iter().filter_map(|r| r.sizes.get(i)).collect();
        let n = per.len().max(1) as f64;
        let time_us = per.iter().map(|s| s.time_us).sum::<f64>() / n;
        let max_rank_time_us = per.iter().map(|s| s.time_us).fold(0.0, f64::max);
        let algbw = if time_us > 0.0 {
            s0.size as f64 / (time_us * 1e-6) / 1e9
        } else {
            0.0
        };
        let cpu_s: f64 = per.iter().map(|s| s.cpu_s).sum();
        let calls: f64 = per.iter().map(|s| s.iters as f64).sum();
        sizes.push(SizeResult {
            size: s0.size,
            count: s0.count,
            iters: s0.iters,
            time_us,
            max_rank_time_us,
            algbw,
            busbw: algbw * factor,
            cpu_us_per_call: if calls > 0.0 { cpu_s * 1e6 / calls } else { 0.0 },
            cpu_s,
        });
    }
    Ok(NcclReport {
        ranks: nranks,
        mode: opts.mode,
        op: opts.op,
        env: opts
            .mode
            .env()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        calls: first.calls,
        calls_by_function: first.calls_by_function.clone(),
        control_calls: first.control_calls,
        duration_s: opts.duration.map(|d| d.as_secs_f64()),
        duration_iters: first.duration_iters,
        sizes,
        verified: reports.iter().all(|r| r.verified),
        nccl_version,
        nccl_library: lib.path.clone(),
        parent_pid: std::process::id(),
        rank_reports: reports,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

/// A rank (child process): runs, writes its result file, returns the exit
/// status. Errors go to the result file, which the parent reports; only
/// when that cannot be written does the rank print its error itself.
pub fn run_rank(opts: &NcclOpts) -> i32 {
    let rank = opts.rank.unwrap_or(0);
    // A rank blocked in a collective would wait forever for a parent that
    // died: have the kernel kill it with the parent.
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and no pointers.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) };
    let res = rank_main(opts);
    let (code, outcome) = match res {
        Ok(report) => (
            0,
            RankOutcome {
                rank,
                error: None,
                report: Some(report),
            },
        ),
        Err(e) => (
            1,
            RankOutcome {
                rank,
                error: Some(crate::error::describe(&e)),
                report: None,
            },
        ),
    };
    let written = opts.result.as_ref().is_some_and(|path| {
        serde_json::to_string(&outcome)
            .ok()
            .is_some_and(|text| std::fs::write(path, text).is_ok())
    });
    if !written {
        errln!(
            "gdrtrace: nccl rank {rank}: could not write the result file; {}",
            outcome.error.as_deref().unwrap_or("no error")
        );
        return 1;
    }
    code
}

/// Per-rank state of the collective loop.
struct RankRun<'a> {
    comm: ffi::Comm<'a>,
    stream: Stream,
    op: NcclOp,
    nranks: usize,
    send: DeviceBuf,
    recv: DeviceBuf,
    /// The stop flag of duration mode: one int32 each, all-reduced with MAX.
    flag_send: DeviceBuf,
    flag_recv: DeviceBuf,
    data_calls: u64,
    control_calls: u64,
    memcpy_calls: u64,
}

impl RankRun<'_> {
    /// One data collective of `size` bytes (enqueued, not waited for).
    fn call(&mut self, size: u64) -> Result<(), NcclError> {
        let (send_count, _, _) = counts(self.op, size, self.nranks);
        let stream = self.stream.raw.cast();
        match self.op {
            // ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
            //     ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
            // SAFETY: send/recv were allocated for the largest size (at
            // least send_count float32s each) on this rank's device; the
            // stream belongs to its current context.
            NcclOp::AllReduce => unsafe {
                self.comm
                    .all_reduce(self.send.ptr, self.recv.ptr, send_count, NCCL_FLOAT32, NCCL_SUM, stream)?
            },
            // ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
            //     ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
            // SAFETY: send holds send_count and recv nranks*send_count
            // float32s (allocated for the largest size); the stream belongs
            // to the current context.
            NcclOp::AllGather => unsafe {
                self.comm
                    .all_gather(self.send.ptr, self.recv.ptr, send_count, NCCL_FLOAT32, stream)?
            },
        }
        self.data_calls += 1;
        Ok(())
    }
}

fn rank_main(opts: &NcclOpts) -> Result<RankReport, NcclError> {
    let started = Instant::now();
    validate(opts)?;
    let rank = opts.rank.ok_or_else(|| NcclError::Usage("--rank missing".into()))?;
    let nranks = opts.nranks.ok_or_else(|| NcclError::Usage("--nranks missing".into()))?;
    if rank >= nranks {
        return Err(NcclError::Usage(format!("--rank {rank} >= --nranks {nranks}")));
    }
    let id_hex = opts
        .id
        .as_deref()
        .ok_or_else(|| NcclError::Usage("--id missing".into()))?;
    let id = cudarc::nccl::sys::ncclUniqueId {
        internal: id_from_hex(id_hex).map_err(NcclError::Usage)?,
    };
    let sizes = opts.size_list();

    cu::init()?;
    let ndev = cu::device_count()?;
    if rank >= ndev {
        return Err(NcclError::Usage(format!("rank {rank} has no GPU ({ndev} visible)")));
    }
    let dev = Device::open(rank)?;
    let lib = Nccl::load()?;
    let nccl_version = lib.version()?;

    let max = sizes.iter().copied().max().unwrap_or(4);
    let (max_send, max_recv, _) = counts(opts.op, max, nranks);
    // all-reduce sends 1.0 from every rank (result: nranks); all-gather
    // sends rank+1 (result: chunk r holds r+1). Filled with cuMemsetD32.
    let fill = match opts.op {
        NcclOp::AllReduce => 1.0f32,
        NcclOp::AllGather => (rank + 1) as f32,
    };
    let send = DeviceBuf::new(&dev, max_send * 4, 0)?;
    let recv = DeviceBuf::new(&dev, max_recv * 4, 0)?;
    let flag_send = DeviceBuf::new(&dev, 4, 0)?;
    let flag_recv = DeviceBuf::new(&dev, 4, 0)?;
    let stream = Stream::new_non_blocking()?;
    stream.memset_d32(send.ptr, fill.to_bits(), max_send)?;
    stream.synchronize()?;

    let comm = lib.comm_init_rank(nranks, id, rank)?;
    let mut run = RankRun {
        comm,
        stream,
        op: opts.op,
        nranks,
        send,
        recv,
        flag_send,
        flag_recv,
        data_calls: 0,
        control_calls: 0,
        memcpy_calls: 0,
    };

    let mut results = Vec::new();
    let mut duration_iters = 0u64;
    if let Some(d) = opts.duration {
        for &s in &sizes {
            for _ in 0..opts.warmup {
                run.call(s)?;
            }
        }
        run.stream.synchronize()?;
        duration_iters = duration_loop(&mut run, &sizes, d, rank, opts.warmup, &mut results)?;
    } else {
        for &s in &sizes {
            results.push(sweep_size(&mut run, s, opts)?);
        }
    }

    // Check the last call's result (the last size in the list).
    let last = sizes.last().copied().unwrap_or(4);
    let verified = verify(&mut run, last, rank)?;

    let RankRun {
        comm,
        stream,
        send,
        recv,
        flag_send,
        flag_recv,
        data_calls,
        control_calls,
        memcpy_calls,
        ..
    } = run;
    stream.synchronize()?;
    comm.destroy()?;
    drop((send, recv, flag_send, flag_recv, stream));

    let mut calls_by_function = BTreeMap::new();
    if data_calls > 0 {
        calls_by_function.insert(opts.op.function().to_string(), data_calls);
    }
    if control_calls > 0 {
        *calls_by_function.entry("ncclAllReduce".to_string()).or_insert(0) += control_calls;
    }
    let device_name = dev.name.clone();
    drop(dev);
    Ok(RankReport {
        rank,
        pid: std::process::id(),
        device: rank,
        device_name,
        nccl_version,
        nccl_library: lib.path.clone(),
        calls: data_calls + control_calls,
        calls_by_function,
        control_calls,
        memcpy_calls,
        sizes: results,
        duration_iters,
        verified,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

fn sweep_size(run: &mut RankRun<'_>, size: u64, opts: &NcclOpts) -> Result<RankSize, NcclError> {
    let (count, _, used) = counts(run.op, size, run.nranks);
    let iters = opts.iters.unwrap_or_else(|| default_iters(used));
    for _ in 0..opts.warmup {
        run.call(size)?;
    }
    run.stream.synchronize()?;
    let cpu0 = cu::cpu_time_s();
    let t0 = Instant::now();
    for _ in 0..iters {
        run.call(size)?;
    }
    run.stream.synchronize()?;
    let t = t0.elapsed().as_secs_f64();
    let cpu_s = (cu::cpu_time_s() - cpu0).max(0.0);
    let time_us = t * 1e6 / iters as f64;
    Ok(RankSize {
        size: used,
        count,
        warmup: opts.warmup,
        iters,
        time_us,
        min_time_us: time_us,
        max_time_us: time_us,
        cpu_s,
    })
}

/// Loops over `sizes` until `d` has passed, one synchronised call per
/// iteration. The ranks agree on when to stop through a one-element
/// all-reduce (MAX of "my time is up") after every batch, so every rank
/// makes the same number of calls.
fn duration_loop(
    run: &mut RankRun<'_>,
    sizes: &[u64],
    d: Duration,
    rank: usize,
    warmup: u64,
    results: &mut Vec<RankSize>,
) -> Result<u64, NcclError> {
    struct Acc {
        n: u64,
        sum_us: f64,
        min_us: f64,
        max_us: f64,
        cpu_s: f64,
    }
    let mut acc: Vec<Acc> = sizes
        .iter()
        .map(|_| Acc {
            n: 0,
            sum_us: 0.0,
            min_us: f64::INFINITY,
            max_us: 0.0,
            cpu_s: 0.0,
        })
        .collect();
    let batch: Vec<usize> = if sizes.len() == 1 {
        vec![0; DURATION_BATCH]
    } else {
        (0..sizes.len()).collect()
    };
    let deadline = Instant::now() + d;
    let mut iter = 0u64;
    let stdout = std::io::stdout();
    loop {
        for &i in &batch {
            let size = sizes[i];
            let (_, _, used) = counts(run.op, size, run.nranks);
            let c0 = cu::cpu_time_s();
            let t0 = Instant::now();
            run.call(size)?;
            run.stream.synchronize()?;
            let us = t0.elapsed().as_secs_f64() * 1e6;
            let a = &mut acc[i];
            a.cpu_s += (cu::cpu_time_s() - c0).max(0.0);
            a.n += 1;
            a.sum_us += us;
            a.min_us = a.min_us.min(us);
            a.max_us = a.max_us.max(us);
            if rank == 0 {
                let mut out = stdout.lock();
                let _ = writeln!(out, "nccl: iter={iter} size={used} time_us={us:.2}");
                let _ = out.flush();
            }
            iter += 1;
        }
        let up = u32::from(Instant::now() >= deadline);
        run.stream.memset_d32(run.flag_send.ptr, up, 1)?;
        // ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
        //     ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
        // SAFETY: both flag buffers hold one int32 on this rank's device;
        // the stream belongs to the current context.
        unsafe {
            run.comm.all_reduce(
                run.flag_send.ptr,
                run.flag_recv.ptr,
                1,
                NCCL_INT32,
                NCCL_MAX,
                run.stream.raw.cast(),
            )?
        };
        run.control_calls += 1;
        run.stream.synchronize()?;
        let mut v = [0u8; 4];
        cu::copy_dtoh(&mut v, run.flag_recv.ptr)?;
        run.memcpy_calls += 1;
        if u32::from_ne_bytes(v) != 0 {
            break;
        }
    }
    for (i, a) in acc.iter().enumerate() {
        let (count, _, used) = counts(run.op, sizes[i], run.nranks);
        results.push(RankSize {
            size: used,
            count,
            warmup,
            iters: a.n,
            time_us: if a.n > 0 { a.sum_us / a.n as f64 } else { 0.0 },
            min_time_us: if a.n > 0 { a.min_us } else { 0.0 },
            max_time_us: a.max_us,
            cpu_s: a.cpu_s,
        });
    }
    Ok(iter)
}

/// Reads back up to [`VERIFY_ELEMS`] elements of the receive buffer after
/// the last call of `size` and checks them.
fn verify(run: &mut RankRun<'_>, size: u64, rank: usize) -> Result<bool, NcclError> {
    let (send_count, recv_count, _) = counts(run.op, size, run.nranks);
    run.stream.synchronize()?;
    let n = recv_count.min(VERIFY_ELEMS);
    let mut bytes = vec![0u8; n * 4];
    cu::copy_dtoh(&mut bytes, run.recv.ptr)?;
    run.memcpy_calls += 1;
    for (i, ch) in bytes.as_chunks::<4>().0.iter().enumerate() {
        let v = f32::from_ne_bytes(*ch);
        let want = match run.op {
            NcclOp::AllReduce => run.nranks as f32,
            NcclOp::AllGather => (i / send_count.max(1) + 1) as f32,
        };
        if v != want {
            return Err(NcclError::Verify {
                rank,
                msg: format!("wrong {} result: element {i} is {v}, expected {want}", run.op),
            });
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busbw_factors_match_nccl_tests() {
        assert_eq!(bus_factor(NcclOp::AllReduce, 1), 0.0);
        assert_eq!(bus_factor(NcclOp::AllReduce, 2), 1.0);
        assert_eq!(bus_factor(NcclOp::AllReduce, 4), 1.5);
        assert_eq!(bus_factor(NcclOp::AllReduce, 8), 1.75);
        assert_eq!(bus_factor(NcclOp::AllGather, 2), 0.5);
        assert_eq!(bus_factor(NcclOp::AllGather, 8), 0.875);
        assert_eq!(bus_factor(NcclOp::AllGather, 0), 0.0);
    }

    #[test]
    fn element_counts() {
        assert_eq!(counts(NcclOp::AllReduce, 8192, 2), (2048, 2048, 8192));
        assert_eq!(counts(NcclOp::AllGather, 8192, 2), (1024, 2048, 8192));
        // Rounded down to whole float32s per rank.
        assert_eq!(counts(NcclOp::AllGather, 100, 3), (8, 24, 96));
        assert_eq!(counts(NcclOp::AllGather, 4, 8), (1, 8, 32));
        assert_eq!(counts(NcclOp::AllReduce, 2, 2), (1, 1, 4));
    }

    #[test]
    fn id_hex_round_trips() {
        let mut id = [0 as std::ffi::c_char; 128];
        for (i, b) in id.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37) as std::ffi::c_char;
        }
        let hex = id_to_hex(&id);
        assert_eq!(hex.len(), 256);
        assert_eq!(id_from_hex(&hex), Ok(id));
        assert!(id_from_hex("abc").is_err());
        assert!(id_from_hex(&"zz".repeat(128)).is_err());
    }

    #[test]
    fn modes_always_disable_nvls() {
        for m in [NcclMode::Auto, NcclMode::NoP2p, NcclMode::NoP2pNoShm] {
            assert!(m.env().contains(&("NCCL_NVLS_ENABLE", "0")));
        }
        assert_eq!(NcclMode::Auto.env().len(), 1);
        assert!(NcclMode::NoP2p.env().contains(&("NCCL_P2P_DISABLE", "1")));
        assert!(!NcclMode::NoP2p.env().iter().any(|(k, _)| *k == "NCCL_SHM_DISABLE"));
        assert!(NcclMode::NoP2pNoShm.env().contains(&("NCCL_SHM_DISABLE", "1")));
    }

    #[test]
    fn rank_args_carry_the_options() {
        let o = NcclOpts {
            op: NcclOp::AllGather,
            mode: NcclMode::NoP2p,
            iters: Some(7),
            duration: Some(Duration::from_millis(1500)),
            ..Default::default()
        };
        let a = rank_args(&o, 1, 2, "ab", Path::new("/tmp/r1.json")).join(" ");
        assert!(a.starts_with("drive nccl --rank 1 --nranks 2 --id ab --result /tmp/r1.json"));
        assert!(a.contains("--op all-gather --mode no-p2p --warmup 5"));
        assert!(a.contains("--sizes 8192,65536,1048576,16777216,268435456"));
        assert!(a.contains("--iters 7"));
        assert!(a.contains("--duration 1.5"));
    }

    #[test]
    fn summary_first_line() {
        let r = NcclReport {
            ranks: 2,
            mode: NcclMode::NoP2p,
            op: NcclOp::AllReduce,
            env: BTreeMap::new(),
            calls: 42,
            calls_by_function: BTreeMap::from([("ncclAllReduce".to_string(), 42)]),
            control_calls: 0,
            duration_s: None,
            duration_iters: 0,
            sizes: vec![],
            verified: true,
            nccl_version: "2.27.7".into(),
            nccl_library: "libnccl.so.2".into(),
            parent_pid: 1,
            rank_reports: vec![],
            elapsed_s: 0.0,
        };
        assert_eq!(r.summary_lines()[0], "nccl: ranks=2 mode=no-p2p op=all-reduce calls=42");
    }
}
