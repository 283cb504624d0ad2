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
    collections::BTreeSet,
    io::{BufRead, BufReader, Write as _},
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use gdrtrace::{
    probes::{
        Status,
        libs::LibFile,
        symbols,
        uapi::{self, Lib},
    },
    session::Session,
    trace::Trace,
};
use integration_tests::{can_trace, standin::*};

#[test]
fn versioned_and_suffixed_variants_are_resolved_and_attached() {
    if !can_trace("versioned_and_suffixed_variants_are_resolved_and_attached") {
        return;
    }
    let s = build_standins(Path::new(env!("CARGO_TARGET_TMPDIR")), "variants");

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
    let Session { ebpf, planner, .. } = &mut sess;
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
            "cuDevicePrimaryCtxRetain",
            "cuMemAlloc_v2",
            "cuMemFree_v2",
            "cuMemHostRegister_v2",
            "cuMemHostUnregister",
            "cuMemcpyAsync",
            "cuMemcpyDtoHAsync_v2",
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
    let s = build_standins(Path::new(env!("CARGO_TARGET_TMPDIR")), "calls");
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
        trace.agg.registry().backing(d.pid, dptr + 4096),
        gdrtrace::model::Backing::Gpu { .. }
    ));
    assert!(op(&report, "cuMemcpyHtoDAsync").is_empty());
}

#[test]
fn library_dlopened_after_attach_is_picked_up() {
    if !can_trace("library_dlopened_after_attach_is_picked_up") {
        return;
    }
    let s = build_standins(Path::new(env!("CARGO_TARGET_TMPDIR")), "late");
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
    let s = build_standins(Path::new(env!("CARGO_TARGET_TMPDIR")), "mntns");
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
    let s = build_standins(Path::new(env!("CARGO_TARGET_TMPDIR")), "sigkill");
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

/// CUDA copies are exact rows (docs/sampling.md#exact-rows): the driver's
/// two copies, made wholly in an off phase of the cycle, are both counted
/// (sampled, their links would have been closed and neither seen).
#[test]
fn copies_made_in_an_off_phase_are_counted() {
    if !can_trace("copies_made_in_an_off_phase_are_counted") {
        return;
    }
    let s = build_standins(Path::new(env!("CARGO_TARGET_TMPDIR")), "offphase");
    let json = s.dir.join("offphase.json");
    // On for the first 250 ms, then off for 9.75 s: the driver loads the
    // libraries a second in, and copies two seconds later (the tracer has
    // attached them by then).
    let script = format!(
        "sleep 1; (sleep 2; echo x) | {} --cuda {} {} 1 0",
        s.driver.display(),
        s.cuda.display(),
        s.ibverbs.display()
    );
    let out = integration_tests::run(&[
        "run",
        "--collectives",
        "250ms/10s",
        "--json",
        json.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert!(out.status.success(), "{}", integration_tests::stderr(&out));
    let r = integration_tests::read_report(&json);
    let copy = single_op(&r, "cuMemcpyHtoD");
    assert_eq!((copy.calls, copy.bytes), (2, 4096 + 8192), "{copy:?}");
}
