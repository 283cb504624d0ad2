//! The stand-in libraries of the library-probe tests (tests/standin/:
//! libibverbs and libcuda stand-ins and a driver program that calls them),
//! built per test, the traced driver process and the checks of what was
//! traced from it. Used by tests/it/uapi.rs.
use std::{
    collections::{BTreeMap, BTreeSet},
    io::{BufRead, BufReader, Read as _, Write as _},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use crate::compile;
use gdrtrace::{
    loader::LoadOptions,
    report::Report,
    session::{Session, SessionOptions},
    trace::Trace,
};

/// Registrations per symbol version, and deregistrations of the first D.
pub const K: usize = 4;
pub const D: usize = 2;
pub const PAGE: u64 = 4096;

/// The symbols the planner must attach in the libibverbs stand-in.
pub const IBVERBS_ATTACHED: &[&str] = &[
    "ibv_reg_mr@IBVERBS_1.0",
    "ibv_reg_mr@IBVERBS_1.1",
    "ibv_reg_mr_iova@IBVERBS_1.7",
    "ibv_reg_mr_iova2@IBVERBS_1.8",
    "ibv_dereg_mr@IBVERBS_1.0",
    "ibv_dereg_mr@IBVERBS_1.1",
    "ibv_alloc_pd@IBVERBS_1.1",
    "ibv_modify_qp@IBVERBS_1.1",
];

// ---------------------------------------------------------------------------
// Building the stand-ins.

/// The libnccl stand-in and the two-rank job over it (`nccl_job.c`), built
/// in a fresh per-test directory under `tmp` (removed on drop).
pub struct NcclJob {
    pub dir: PathBuf,
    /// `libnccl.so.2` (the tracer recognises it by file name).
    pub nccl: PathBuf,
    pub job: PathBuf,
}

impl Drop for NcclJob {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Builds the NCCL stand-in job as `dir_name/job_name` under `tmp`: the
/// job's command name is its file name (`attach --comm` finds it by that).
pub fn build_nccl_job(tmp: &Path, dir_name: &str, job_name: &str) -> NcclJob {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("standin");
    // Under the target directory rather than /tmp, which may be noexec.
    let dir = tmp.join(dir_name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creating the test directory");
    let s = |p: &Path| p.to_str().expect("UTF-8 path").to_string();
    let nccl = dir.join("libnccl.so.2");
    let job = dir.join(job_name);
    compile(&[
        "-O2",
        "-fPIC",
        "-shared",
        "-Wall",
        "-pthread",
        "-Wl,-soname,libnccl.so.2",
        "-o",
        &s(&nccl),
        &s(&src.join("standin_nccl.c")),
    ]);
    compile(&["-O2", "-Wall", "-o", &s(&job), &s(&src.join("nccl_job.c")), "-ldl"]);
    NcclJob { dir, nccl, job }
}

/// A per-test directory with freshly built stand-ins; removed on drop.
pub struct StandIns {
    pub dir: PathBuf,
    pub ibverbs: PathBuf,
    pub cuda: PathBuf,
    pub driver: PathBuf,
}

impl Drop for StandIns {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn build_standins(tmp: &Path, test: &str) -> StandIns {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("standin");
    // Under the target directory rather than /tmp, which may be noexec
    // (dlopen needs executable mappings).
    let dir = tmp.join(format!("gdrtrace-uapi-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creating the stand-in directory");
    let s = |p: &Path| p.to_str().expect("UTF-8 path").to_string();
    // File names as the real libraries: the tracer recognises them by name.
    let ibverbs = dir.join("libibverbs.so.1");
    let cuda = dir.join("libcuda.so.1");
    let driver = dir.join("uapi_driver");
    compile(&[
        "-O2",
        "-fPIC",
        "-shared",
        "-Wall",
        &format!("-Wl,--version-script={}", s(&src.join("standin_ibverbs.map"))),
        "-Wl,-soname,libibverbs.so.1",
        "-o",
        &s(&ibverbs),
        &s(&src.join("standin_ibverbs.c")),
    ]);
    compile(&[
        "-O2",
        "-fPIC",
        "-shared",
        "-Wall",
        "-Wl,-soname,libcuda.so.1",
        "-o",
        &s(&cuda),
        &s(&src.join("standin_cuda.c")),
    ]);
    compile(&[
        "-O2",
        "-Wall",
        "-o",
        &s(&driver),
        &s(&src.join("uapi_driver.c")),
        "-ldl",
    ]);
    StandIns {
        dir,
        ibverbs,
        cuda,
        driver,
    }
}

// ---------------------------------------------------------------------------
// The traced driver process.

pub struct Driver {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    pub stdout: BufReader<ChildStdout>,
    pub pid: u32,
    /// Path of libibverbs as the driver loaded it (inside its namespace).
    pub lib: String,
}

impl Driver {
    /// Starts the driver and waits until it says it is ready (libraries
    /// loaded, unless `--late`), blocked on stdin.
    pub fn start(s: &StandIns, opts: &[&str]) -> Driver {
        let mut child = Command::new(&s.driver)
            .args(opts)
            .arg(&s.ibverbs)
            .args([K.to_string(), D.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawning the driver");
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("reading the driver");
        let Some(rest) = line.trim().strip_prefix("ready pid=") else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("driver did not get ready: {line:?}");
        };
        let (pid, lib) = rest.split_once(" lib=").expect("ready line: pid and lib");
        let pid: u32 = pid.parse().expect("the driver prints its pid");
        assert_eq!(pid, child.id());
        Driver {
            child,
            stdin,
            stdout,
            pid,
            lib: lib.to_string(),
        }
    }

    /// Lets the driver run its workload.
    pub fn release(&mut self) {
        let mut stdin = self.stdin.take().expect("released once");
        stdin.write_all(b"g").expect("releasing the driver");
    }

    /// Waits (without blocking the runtime) for the driver to exit.
    async fn exited(&mut self, limit: Duration) -> Result<ExitStatus, String> {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().map_err(|e| e.to_string())? {
                return Ok(st);
            }
            if t0.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return Err(format!("driver did not exit within {limit:?}"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The rest of its output (after it exited).
    pub fn output(&mut self) -> String {
        let mut s = String::new();
        self.stdout.read_to_string(&mut s).expect("reading the driver's output");
        s
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("starting the tokio runtime")
}

pub fn session() -> Session {
    let opts = SessionOptions {
        load: LoadOptions {
            ringbuf_bytes: 1 << 22,
            targets_only: true,
            ..LoadOptions::default()
        },
        families: None,
        installed_libraries: false,
        collectives: gdrtrace::sampling::Mode::Exact,
    };
    Session::open(&opts).expect("opening a session")
}

/// Releases the driver and traces it until it exits; returns its output.
pub fn trace_driver(trace: &mut Trace, d: &mut Driver) -> String {
    let mut status = None;
    runtime()
        .block_on(trace.run_until(async {
            d.release();
            status = Some(d.exited(Duration::from_secs(30)).await);
            // Let the last events reach the ring buffer reader.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }))
        .expect("tracing");
    let out = d.output();
    match status.expect("stop future ran") {
        Ok(st) if st.success() => out,
        Ok(st) => panic!("driver failed ({st}):\n{out}"),
        Err(e) => panic!("{e}:\n{out}"),
    }
}

// ---------------------------------------------------------------------------
// What the driver printed.

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MrLine {
    pub ver: String,
    pub ptr: u64,
    pub addr: u64,
    pub len: u64,
    pub lkey: u32,
    pub rkey: u32,
}

pub fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

pub fn num(s: &str) -> u64 {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).expect("hex number"),
        None => s.parse().expect("number"),
    }
}

pub struct Workload {
    pub regs: Vec<MrLine>,
    pub deregs: Vec<u64>,
    /// MRs alive at the end, by pointer, replaying the output in order.
    pub live: BTreeMap<u64, MrLine>,
    /// Pinned bytes high-water, replaying the output in order.
    pub high_water: u64,
}

pub fn parse(out: &str) -> Workload {
    let mut w = Workload {
        regs: Vec::new(),
        deregs: Vec::new(),
        live: BTreeMap::new(),
        high_water: 0,
    };
    let mut pinned = 0u64;
    for line in out.lines() {
        if line.starts_with("mr ") {
            let m = MrLine {
                ver: field(line, "ver").to_string(),
                ptr: num(field(line, "ptr")),
                addr: num(field(line, "addr")),
                len: num(field(line, "len")),
                lkey: num(field(line, "lkey")) as u32,
                rkey: num(field(line, "rkey")) as u32,
            };
            pinned += m.len;
            w.high_water = w.high_water.max(pinned);
            w.live.insert(m.ptr, m.clone());
            w.regs.push(m);
        } else if line.starts_with("dereg ") {
            assert_eq!(field(line, "ret"), "0", "{line}");
            let ptr = num(field(line, "ptr"));
            let m = w.live.remove(&ptr).expect("deregistered MR was registered");
            pinned -= m.len;
            w.deregs.push(ptr);
        }
    }
    w
}

// ---------------------------------------------------------------------------
// Checks shared by the traced tests.

pub fn op<'a>(r: &'a Report, name: &str) -> Vec<&'a gdrtrace::report::Operation> {
    r.operations.iter().filter(|o| o.name == name).collect()
}

/// One operation row (one transport) of `name`, or a panic with the report.
pub fn single_op<'a>(r: &'a Report, name: &str) -> &'a gdrtrace::report::Operation {
    match op(r, name).as_slice() {
        [o] => o,
        rows => panic!(
            "expected one {name} row, got {}: {:#?}",
            rows.len(),
            r.operations
                .iter()
                .map(|o| (&o.name, o.transport, o.calls, o.bytes))
                .collect::<Vec<_>>()
        ),
    }
}

/// Everything the tracer must have seen of the driver's ibverbs workload.
pub fn check_ibverbs(trace: &Trace, report: &Report, pid: u32, out: &str) {
    let w = parse(out);
    // The driver's own view: K registrations per version, each version's
    // MRs carrying that entry point's keys (1.1 forwards to iova2).
    assert_eq!(w.regs.len(), 2 * K, "driver output:\n{out}");
    assert_eq!(w.deregs.len(), 2 * D, "driver output:\n{out}");
    for m in &w.regs {
        let tag = match m.ver.as_str() {
            "IBVERBS_1.0" => 0x10,
            "IBVERBS_1.1" => 0x11,
            v => panic!("unexpected version {v}"),
        };
        assert_eq!(m.lkey >> 24, tag, "stand-in entry point of {m:?}");
    }
    let lens: u64 = (1..=K as u64).map(|i| i * PAGE).sum();

    // Cookie tagging and argument capture: both versions report as the
    // ibv_reg_mr row, with every length.
    let reg = single_op(report, "ibv_reg_mr");
    assert_eq!(
        reg.calls,
        2 * K as u64,
        "ibv_reg_mr calls: K through IBVERBS_1.0 and K through IBVERBS_1.1"
    );
    assert_eq!(reg.bytes, 2 * lens, "ibv_reg_mr lengths");
    assert_eq!(reg.errors, 0);
    assert_eq!(reg.transport, "host-only", "{}", reg.evidence);
    let iova2 = single_op(report, "ibv_reg_mr_iova2");
    assert_eq!(
        (iova2.calls, iova2.bytes),
        (K as u64, lens),
        "ibv_reg_mr@@IBVERBS_1.1 forwards to ibv_reg_mr_iova2"
    );
    let dereg = single_op(report, "ibv_dereg_mr");
    assert_eq!(dereg.calls, 2 * D as u64, "ibv_dereg_mr calls (both versions)");
    assert_eq!(dereg.errors, 0);

    let p = report
        .processes
        .iter()
        .find(|p| p.pid == pid)
        .unwrap_or_else(|| panic!("driver {pid} not in the report"));
    assert_eq!(p.calls.get("ibv_reg_mr"), Some(&(2 * K as u64)), "{:?}", p.calls);
    assert_eq!(p.calls.get("ibv_dereg_mr"), Some(&(2 * D as u64)), "{:?}", p.calls);

    // Churn: the nested iova2 call is not a second registration.
    let churn = p.churn.as_ref().expect("churn of the driver");
    assert_eq!(churn.registrations, 2 * K as u64, "registrations: {churn:?}");
    assert_eq!(churn.deregistrations, 2 * D as u64, "deregistrations: {churn:?}");
    assert_eq!(
        churn.reregistrations_of_seen_range, K as u64,
        "IBVERBS_1.1 registers the ranges IBVERBS_1.0 did: {churn:?}"
    );
    let live_bytes: u64 = w.live.values().map(|m| m.len).sum();
    assert_eq!(churn.pinned_bytes, live_bytes, "{churn:?}");
    assert_eq!(churn.pinned_bytes_high_water, w.high_water, "{churn:?}");

    // Return capture: the registry holds exactly the live MRs, keyed by the
    // returned `struct ibv_mr *`, with the keys the stand-in returned.
    let reg_proc = trace
        .agg
        .registry()
        .procs
        .get(&pid)
        .unwrap_or_else(|| panic!("no registry entry for {pid}"));
    let got: BTreeMap<u64, (u64, u64, u32, u32)> = reg_proc
        .mrs
        .iter()
        .map(|(k, m)| (*k, (m.addr, m.len, m.lkey, m.rkey)))
        .collect();
    let want: BTreeMap<u64, (u64, u64, u32, u32)> = w
        .live
        .iter()
        .map(|(k, m)| (*k, (m.addr, m.len, m.lkey, m.rkey)))
        .collect();
    assert_eq!(got, want, "registry MRs (addr, len, lkey, rkey) by ibv_mr pointer");
    let versions: BTreeSet<&str> = w.live.values().map(|m| m.ver.as_str()).collect();
    assert_eq!(versions.len(), 2, "live MRs of both versions are checked");
    assert!(report.loss.complete, "{:?}", report.loss);
}

pub fn library_row(report: &Report, point: &str) -> gdrtrace::probes::Coverage {
    report
        .coverage
        .iter()
        .find(|c| c.point == point)
        .unwrap_or_else(|| panic!("no coverage row {point}"))
        .clone()
}

// ---------------------------------------------------------------------------
// The tests.
