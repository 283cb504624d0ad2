//! Library probes against stand-in libraries (issue 4's CI items), with
//! real BPF on this host and no GPU or RDMA hardware.
//!
//! `tests/standin/` holds a libibverbs stand-in (two `ibv_reg_mr` and two
//! `ibv_dereg_mr` functions under the symbol versions IBVERBS_1.0 and
//! @@IBVERBS_1.1, as Debian's libibverbs.so.1), a libcuda stand-in (suffixed
//! variants `cuMemcpyHtoD_v2`, `cuMemcpyHtoD_v2_ptds`, ...) and a driver
//! program that dlopens them and calls them as an application would. Each
//! test compiles them with the host's C compiler (`$CC`, else `cc`) into its
//! own directory, so every test has its own library inodes: probes one test
//! attaches never show up in another test's processes.
//!
//! Waits are handshakes with bounds, not fixed sleeps: the driver blocks on
//! stdin until released inside the tracing loop, and with `--late` it polls
//! its own text for the uprobe breakpoints (10 s bound) before calling.
//!
//! What is proven:
//! - `versioned_and_suffixed_variants_are_resolved_and_attached`: symbol
//!   resolution lists both versions of `ibv_reg_mr` at different offsets and
//!   the planner attaches every version and suffixed variant of a table row
//!   (and nothing else).
//! - `versioned_calls_are_captured_with_keys_and_registry`: a traced process
//!   calling both versions: cookie tagging (every variant reports as its
//!   row), argument capture (lengths), return capture (`struct ibv_mr`
//!   lkey/rkey, out-pointer of `cuMemAlloc_v2`), registry and churn.
//! - `library_dlopened_after_attach_is_picked_up`: the 250 ms rescan of
//!   traced processes attaches a library dlopened after tracing started.
//! - `library_in_another_mount_namespace_resolves_through_proc_root`: a
//!   library whose path exists only in the process's own mount namespace is
//!   opened through /proc/PID/root, attached and traced.
use std::{
    collections::{BTreeMap, BTreeSet},
    io::{BufRead, BufReader, Read as _, Write as _},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use gdrtrace::{
    loader::LoadOptions,
    probes::{
        Status,
        libs::LibFile,
        symbols,
        uapi::{self, Lib},
    },
    report::Report,
    session::{Session, SessionOptions},
    trace::Trace,
};
use integration_tests::{can_trace, compile};

/// Registrations per symbol version, and deregistrations of the first D.
const K: usize = 4;
const D: usize = 2;
const PAGE: u64 = 4096;

/// The symbols the planner must attach in the libibverbs stand-in.
const IBVERBS_ATTACHED: &[&str] = &[
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

/// A per-test directory with freshly built stand-ins; removed on drop.
struct StandIns {
    dir: PathBuf,
    ibverbs: PathBuf,
    cuda: PathBuf,
    driver: PathBuf,
}

impl Drop for StandIns {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn build_standins(test: &str) -> StandIns {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("standin");
    // Under the target directory rather than /tmp, which may be noexec
    // (dlopen needs executable mappings).
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("gdrtrace-uapi-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
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

struct Driver {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    pid: u32,
    /// Path of libibverbs as the driver loaded it (inside its namespace).
    lib: String,
}

impl Driver {
    /// Starts the driver and waits until it says it is ready (libraries
    /// loaded, unless `--late`), blocked on stdin.
    fn start(s: &StandIns, opts: &[&str]) -> Driver {
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
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).expect("reading the driver");
        let Some(rest) = line.trim().strip_prefix("ready pid=") else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("driver did not get ready: {line:?}");
        };
        let (pid, lib) = rest.split_once(" lib=").expect("ready line: pid and lib");
        let pid: u32 = pid.parse().unwrap();
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
    fn release(&mut self) {
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
    fn output(&mut self) -> String {
        let mut s = String::new();
        self.stdout.read_to_string(&mut s).unwrap();
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

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn session() -> Session {
    let opts = SessionOptions {
        load: LoadOptions {
            ringbuf_bytes: 1 << 22,
            targets_only: true,
            ..LoadOptions::default()
        },
        families: None,
        installed_libraries: false,
    };
    Session::open(&opts).expect("opening a session")
}

/// Releases the driver and traces it until it exits; returns its output.
fn trace_driver(trace: &mut Trace, d: &mut Driver) -> String {
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
struct MrLine {
    ver: String,
    ptr: u64,
    addr: u64,
    len: u64,
    lkey: u32,
    rkey: u32,
}

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

fn num(s: &str) -> u64 {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap(),
        None => s.parse().unwrap(),
    }
}

struct Workload {
    regs: Vec<MrLine>,
    deregs: Vec<u64>,
    /// MRs alive at the end, by pointer, replaying the output in order.
    live: BTreeMap<u64, MrLine>,
    /// Pinned bytes high-water, replaying the output in order.
    high_water: u64,
}

fn parse(out: &str) -> Workload {
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

fn op<'a>(r: &'a Report, name: &str) -> Vec<&'a gdrtrace::report::Operation> {
    r.operations.iter().filter(|o| o.name == name).collect()
}

/// One operation row (one transport) of `name`, or a panic with the report.
fn single_op<'a>(r: &'a Report, name: &str) -> &'a gdrtrace::report::Operation {
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
fn check_ibverbs(trace: &Trace, report: &Report, pid: u32, out: &str) {
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
        .registry
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

fn library_row(report: &Report, point: &str) -> gdrtrace::probes::Coverage {
    report
        .coverage
        .iter()
        .find(|c| c.point == point)
        .unwrap_or_else(|| panic!("no coverage row {point}"))
        .clone()
}

// ---------------------------------------------------------------------------
// The tests.

#[test]
fn versioned_and_suffixed_variants_are_resolved_and_attached() {
    if !can_trace("versioned_and_suffixed_variants_are_resolved_and_attached") {
        return;
    }
    let s = build_standins("variants");

    // Symbol resolution: both versions, at different offsets.
    let syms = symbols::functions(&s.ibverbs).expect("reading the stand-in's symbols");
    let reg: Vec<_> = syms.iter().filter(|x| x.name == "ibv_reg_mr").collect();
    let shown: BTreeSet<String> = reg.iter().map(|x| x.display()).collect();
    assert_eq!(
        shown,
        BTreeSet::from([
            "ibv_reg_mr@IBVERBS_1.0".to_string(),
            "ibv_reg_mr@IBVERBS_1.1".to_string()
        ]),
        "{reg:#?}"
    );
    let offsets: BTreeSet<u64> = reg.iter().map(|x| x.file_offset).collect();
    assert_eq!(offsets.len(), 2, "two functions at different offsets: {reg:#?}");

    let file = |lib: Lib, path: &Path| LibFile {
        lib,
        path: path.display().to_string(),
        host_path: path.to_path_buf(),
        id: gdrtrace::probes::libs::file_id(path).unwrap(),
    };
    assert_eq!(Lib::of_path(s.ibverbs.to_str().unwrap()), Some(Lib::Ibverbs));
    assert_eq!(Lib::of_path(s.cuda.to_str().unwrap()), Some(Lib::Cuda));

    let mut sess = session();
    let Session { ebpf, planner } = &mut sess;
    assert!(planner.attach_library(ebpf, &file(Lib::Ibverbs, &s.ibverbs)));
    assert!(
        !planner.attach_library(ebpf, &file(Lib::Ibverbs, &s.ibverbs)),
        "a file is attached once per (dev, inode)"
    );
    assert!(planner.attach_library(ebpf, &file(Lib::Cuda, &s.cuda)));

    let by_path = |p: &Path| {
        planner
            .libs
            .values()
            .find(|a| a.path == p.display().to_string())
            .unwrap_or_else(|| panic!("{} not attached", p.display()))
            .clone()
    };
    let ib = by_path(&s.ibverbs);
    assert!(ib.errors.is_empty(), "{:?}", ib.errors);
    let got: BTreeSet<&str> = ib.symbols.iter().map(String::as_str).collect();
    assert_eq!(
        got,
        IBVERBS_ATTACHED.iter().copied().collect::<BTreeSet<_>>(),
        "ibverbs symbols attached"
    );
    assert_eq!(
        ib.symbols.len(),
        IBVERBS_ATTACHED.len(),
        "each attached once: {:?}",
        ib.symbols
    );
    // Every other libibverbs row of the table is reported as not exported.
    let exported: BTreeSet<&str> = IBVERBS_ATTACHED.iter().map(|s| s.split('@').next().unwrap()).collect();
    let want_missing: BTreeSet<&str> = uapi::TABLE
        .iter()
        .filter(|r| r.lib == Lib::Ibverbs && !exported.contains(r.symbol))
        .map(|r| r.symbol)
        .collect();
    assert!(want_missing.contains("ibv_rereg_mr"));
    assert_eq!(ib.missing.iter().copied().collect::<BTreeSet<_>>(), want_missing);

    let cu = by_path(&s.cuda);
    assert!(cu.errors.is_empty(), "{:?}", cu.errors);
    let mut got: Vec<&str> = cu.symbols.iter().map(String::as_str).collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            "cuMemAlloc_v2",
            "cuMemFree_v2",
            "cuMemcpyHtoD",
            "cuMemcpyHtoDAsync_v2",
            "cuMemcpyHtoDAsync_v2_ptsz",
            "cuMemcpyHtoD_v2",
            "cuMemcpyHtoD_v2_ptds",
        ],
        "cuda variants attached (and not cuMemcpyHtoD_v2_unknownsuffix)"
    );

    // The coverage rows say so.
    let rows = planner.library_rows();
    let ibrow = rows.iter().find(|c| c.point == "libibverbs").unwrap();
    assert_eq!(ibrow.status, Status::Attached, "{ibrow:?}");
    let want = format!("{}: {} symbols attached", s.ibverbs.display(), IBVERBS_ATTACHED.len());
    assert!(ibrow.detail.contains(&want), "{:?} lacks {want:?}", ibrow.detail);
    let curow = rows.iter().find(|c| c.point == "libcuda").unwrap();
    assert_eq!(curow.status, Status::Attached, "{curow:?}");
}

#[test]
fn versioned_calls_are_captured_with_keys_and_registry() {
    if !can_trace("versioned_calls_are_captured_with_keys_and_registry") {
        return;
    }
    let s = build_standins("calls");
    let cuda = s.cuda.to_str().unwrap().to_string();
    let mut d = Driver::start(&s, &["--cuda", &cuda]);
    let mut sess = session();
    sess.add_target(d.pid).unwrap();
    assert_eq!(
        sess.attach_libraries_of(d.pid),
        2,
        "libibverbs.so.1 and libcuda.so.1 mapped by the driver"
    );
    let mut trace = Trace::new(sess);
    trace.agg.add_process(d.pid, None);
    let out = trace_driver(&mut trace, &mut d);
    let report = trace.report(vec![], None).unwrap();
    check_ibverbs(&trace, &report, d.pid, &out);

    // Suffixed variants report as their row (the cookie), with their sizes;
    // the out-pointer of cuMemAlloc_v2 is read at return.
    let dptr = num(out
        .lines()
        .find_map(|l| l.strip_prefix("cuda dptr="))
        .unwrap_or_else(|| panic!("no cuda line in:\n{out}")));
    let alloc = single_op(&report, "cuMemAlloc");
    assert_eq!((alloc.calls, alloc.bytes), (1, 1 << 20));
    let copy = single_op(&report, "cuMemcpyHtoD");
    assert_eq!(
        (copy.calls, copy.bytes),
        (2, 4096 + 8192),
        "cuMemcpyHtoD_v2 and cuMemcpyHtoD_v2_ptds"
    );
    assert_eq!(
        copy.transport, "host-staged",
        "pageable source into the allocation: {}",
        copy.evidence
    );
    assert!(matches!(
        trace.agg.registry.backing(d.pid, dptr + 4096),
        gdrtrace::model::Backing::Gpu { .. }
    ));
    assert!(op(&report, "cuMemcpyHtoDAsync").is_empty());
}

#[test]
fn library_dlopened_after_attach_is_picked_up() {
    if !can_trace("library_dlopened_after_attach_is_picked_up") {
        return;
    }
    let s = build_standins("late");
    let mut d = Driver::start(&s, &["--late"]);
    let mut sess = session();
    sess.add_target(d.pid).unwrap();
    assert_eq!(
        sess.attach_libraries_of(d.pid),
        0,
        "nothing of the table is mapped before the dlopen"
    );
    let mut trace = Trace::new(sess);
    trace.agg.add_process(d.pid, None);
    // The driver dlopens only once released, inside the tracing loop.
    let out = trace_driver(&mut trace, &mut d);
    println!(
        "{}",
        out.lines()
            .find(|l| l.starts_with("probes "))
            .unwrap_or("no probe line")
    );
    assert!(
        out.lines().any(|l| l.starts_with("probes seen after")),
        "the tracer's rescan did not attach the library dlopened after tracing started:\n{out}"
    );
    let attached = trace
        .session
        .planner
        .libs
        .values()
        .find(|a| Path::new(&a.path) == s.ibverbs)
        .unwrap_or_else(|| panic!("{} not attached: {:?}", s.ibverbs.display(), trace.session.planner.libs));
    assert_eq!(attached.symbols.len(), IBVERBS_ATTACHED.len(), "{attached:?}");
    let report = trace.report(vec![], None).unwrap();
    check_ibverbs(&trace, &report, d.pid, &out);
}

#[test]
fn library_in_another_mount_namespace_resolves_through_proc_root() {
    if !can_trace("library_in_another_mount_namespace_resolves_through_proc_root") {
        return;
    }
    let s = build_standins("mntns");
    // An empty directory here; inside the driver's namespace a tmpfs holding
    // its own copy of the library.
    let mnt = s.dir.join("ns-only");
    std::fs::create_dir_all(&mnt).unwrap();
    let mnt_s = mnt.to_str().unwrap().to_string();
    let mut d = Driver::start(&s, &["--ns", &mnt_s]);
    let ns_path = d.lib.clone();
    assert_eq!(Path::new(&ns_path), mnt.join("libibverbs.so.1"));
    assert!(
        !Path::new(&ns_path).exists(),
        "{ns_path} must exist only in the driver's mount namespace"
    );
    assert!(
        Path::new(&format!("/proc/{}/root{ns_path}", d.pid)).exists(),
        "and be visible through /proc/PID/root"
    );

    let mut sess = session();
    sess.add_target(d.pid).unwrap();
    assert_eq!(sess.attach_libraries_of(d.pid), 1, "the namespace's copy is attached");
    let att = sess
        .planner
        .libs
        .values()
        .find(|a| a.path == ns_path)
        .unwrap_or_else(|| panic!("{ns_path} not in planner.libs: {:?}", sess.planner.libs))
        .clone();
    assert!(att.errors.is_empty(), "{:?}", att.errors);
    assert_eq!(att.symbols.len(), IBVERBS_ATTACHED.len(), "{att:?}");

    let mut trace = Trace::new(sess);
    trace.agg.add_process(d.pid, None);
    let out = trace_driver(&mut trace, &mut d);
    let report = trace.report(vec![], None).unwrap();
    let row = library_row(&report, "libibverbs");
    assert_eq!(row.status, Status::Attached, "{row:?}");
    let want = format!("{ns_path}: {} symbols attached", IBVERBS_ATTACHED.len());
    assert!(row.detail.contains(&want), "{:?} lacks {want:?}", row.detail);
    check_ibverbs(&trace, &report, d.pid, &out);
}

/// The tracer is killed with SIGKILL while the target is inside (and
/// between) probed calls: the target finishes every call, with the right
/// results, and exits normally. The kill is proven to land mid-loop: the
/// target's progress (its line per call, line-buffered) is read at the
/// kill and must be past the first call and short of the last.
#[test]
fn sigkill_of_the_tracer_mid_call_leaves_the_target_intact() {
    use std::sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    };
    if !can_trace("sigkill_of_the_tracer_mid_call_leaves_the_target_intact") {
        return;
    }
    const CALLS: usize = 20000;
    let s = build_standins("sigkill");
    let mut target = Command::new(&s.driver)
        .arg(&s.ibverbs)
        .args([CALLS.to_string(), "0".to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawning the driver");
    let mut stdin = target.stdin.take().unwrap();
    let mut out = BufReader::new(target.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.starts_with("ready pid="), "{line}");
    let done = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicBool::new(false));
    let (d, f) = (done.clone(), finished.clone());
    let reader = std::thread::spawn(move || {
        let mut rest = String::new();
        let mut l = String::new();
        while out.read_line(&mut l).unwrap_or(0) > 0 {
            if l.starts_with("mr ") {
                d.fetch_add(1, Ordering::SeqCst);
            }
            if l.trim_end() == "done" {
                f.store(true, Ordering::SeqCst);
            }
            rest.push_str(&l);
            l.clear();
        }
        rest
    });
    let mut tracer = Command::new(integration_tests::gdrtrace_path())
        .args(["attach", "--pid", &target.id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(tracer.stderr.take().unwrap());
    let mut l = String::new();
    loop {
        l.clear();
        assert!(err.read_line(&mut l).unwrap() > 0, "tracer exited before attaching");
        if l.contains("attached to") {
            break;
        }
    }
    stdin.write_all(b"g").unwrap();
    // Wait (bounded) for the first traced call, then kill at once: uprobe
    // hits cost ~12 us here, so the 40000 calls take about half a second.
    let until = Instant::now() + Duration::from_secs(30);
    while done.load(Ordering::SeqCst) == 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(1));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(tracer.id() as i32, libc::SIGKILL) };
    let at_kill = done.load(Ordering::SeqCst);
    let finished_at_kill = finished.load(Ordering::SeqCst);
    let _ = tracer.wait();
    let status = target.wait().unwrap();
    let rest = reader.join().unwrap();
    assert!(
        at_kill > 0 && at_kill < 2 * CALLS && !finished_at_kill,
        "the kill did not land mid-loop: {at_kill} of {} calls done",
        2 * CALLS
    );
    assert!(status.success(), "target exited with {status}");
    let mrs = rest.lines().filter(|l| l.starts_with("mr ")).count();
    assert_eq!(mrs, 2 * CALLS, "every registration returned an MR");
    assert!(
        rest.trim_end().ends_with("done"),
        "target did not finish: {}",
        &rest[rest.len().saturating_sub(200)..]
    );
}
