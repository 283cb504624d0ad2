//! The first vertical slice: `gdrtrace run -- gdrtrace drive pin-churn`
//! reports exactly the registrations the workload made, a latency
//! histogram, and an nr_foll_pin delta consistent with the pages registered.
use gdrtrace::{
    cmd::doctor::Doctor,
    probes::{Family, Status, uapi::Lib},
};
use integration_tests::{can_trace, field, parse_as, read_report, run, stderr, stdout};

#[test]
fn run_pin_churn_counts_match_the_workload() {
    if !can_trace("run_pin_churn_counts_match_the_workload") {
        return;
    }
    let dir = integration_tests::scratch("pc");
    let json = dir.join("report.json");
    let bin = integration_tests::gdrtrace_path();
    let o = run(&[
        "run",
        "--json",
        json.to_str().unwrap(),
        "--",
        bin.to_str().unwrap(),
        "drive",
        "pin-churn",
        "--iterations",
        "150",
        "--buffers",
        "3",
        "--pages",
        "8",
        "--odirect-mib",
        "2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let line = out
        .lines()
        .find(|l| l.starts_with("pin-churn: pid="))
        .expect("workload summary line");
    let (pid, regs, unregs, pages) = (
        field(line, "pid"),
        field(line, "registrations"),
        field(line, "unregistrations"),
        field(line, "pages_registered"),
    );
    assert_eq!((regs, pages), (150, 150 * 3 * 8));
    let r = read_report(&json);
    assert_eq!(r.schema, "gdrtrace.report/v1");
    let p = r
        .processes
        .iter()
        .find(|p| u64::from(p.pid) == pid)
        .expect("workload process in report");
    assert_eq!(p.calls.get("io_uring_register:register-buffers"), Some(&regs));
    assert_eq!(p.calls.get("io_uring_register:unregister-buffers"), Some(&unregs));
    // Library coverage per process: each table library attached or unavailable with a reason.
    let libs = &p.libraries;
    assert_eq!(libs.len(), Lib::ALL.len(), "{libs:?}");
    for l in libs {
        assert!(l.status == Status::Attached || !l.detail.is_empty(), "{l:?}");
    }
    let cuda = libs.iter().find(|l| l.lib == Lib::Cuda).unwrap();
    if cuda.status == Status::Unavailable {
        assert!(cuda.detail.contains("not mapped"), "{cuda:?}");
    }
    let op = r
        .operations
        .iter()
        .find(|o| o.name == "io_uring_register:register-buffers")
        .unwrap();
    assert_eq!(op.transport, "host-only");
    assert_eq!(op.latency.count, regs);
    let buckets = &op.latency.buckets;
    assert!(!buckets.is_empty());
    assert_eq!(buckets.iter().map(|b| b.count).sum::<u64>(), regs);
    // Text report: bpftrace-style histogram with the unit in the header.
    assert!(
        out.contains("@io_uring_register:register-buffers[host-only] latency (ns):"),
        "{out}"
    );
    // Counter-based signal: every registered page was pinned and released.
    if let Some(d) = r.pin_counters.delta {
        let (acq, rel) = (d.acquired, d.released);
        assert!(
            acq >= pages && rel >= pages,
            "nr_foll_pin delta {acq}/{rel} < {pages} pages registered"
        );
        // Other activity on the machine may pin too, but not wildly more.
        assert!(
            acq < pages * 4 + 65536,
            "nr_foll_pin delta {acq} implausibly large for {pages} pages"
        );
    } else {
        println!("skipping nr_foll_pin check: /proc/vmstat lacks nr_foll_pin_*");
    }
    // Signals say where each came from.
    let sig = &r.signals;
    assert!(sig.iter().any(|s| s.source == "counter" && s.available));
    assert!(sig.iter().any(|s| s.source == "probe" && s.available));
    assert_eq!(r.loss.ringbuf_drops, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn doctor_reports_what_this_kernel_allows() {
    if !can_trace("doctor_reports_what_this_kernel_allows") {
        return;
    }
    let o = run(&["doctor", "--json"]);
    assert!(o.status.success(), "doctor failed: {}", stderr(&o));
    let d: Doctor = parse_as("doctor --json", &stdout(&o));
    let kind = |k: &str| {
        d.program_kinds
            .iter()
            .find(|x| x.kind == k)
            .unwrap_or_else(|| panic!("no program kind {k}"))
    };
    for k in ["tracepoint", "raw_tracepoint", "uprobe", "uretprobe"] {
        assert!(kind(k).available, "{k}: {:?}", kind(k));
    }
    // Whatever the kernel, an unavailable kind carries its reason.
    for k in ["fentry", "fexit", "kprobe", "kretprobe"] {
        let v = kind(k);
        if !v.available {
            assert!(
                v.error.as_deref().is_some_and(|e| !e.is_empty()),
                "{k} unavailable without a reason"
            );
        }
    }
    assert!(d.ring_buffer.available);
    assert!(d.coverage.len() >= 40);
}

#[test]
fn validate_degrades_cleanly_without_kernel_probes() {
    if !can_trace("validate_degrades_cleanly_without_kernel_probes") {
        return;
    }
    let json = std::env::temp_dir().join(format!("gdrtrace-validate-{}.json", std::process::id()));
    let o = run(&[
        "validate",
        "--require-kernel-probes",
        "--iterations",
        "20",
        // UCX has its own tests (ucx.rs); this one is about kernel probes.
        "--no-ucx",
        "--json",
        json.to_str().unwrap(),
    ]);
    let out = stdout(&o);
    let r = read_report(&json);
    let _ = std::fs::remove_file(&json);
    // The user-space and counter-based signals work either way.
    assert!(out.contains("validate: 6 checks passed, 0 failed"), "{out}");
    let pinning_attached = r
        .coverage
        .iter()
        .any(|c| c.family == Family::Pinning && c.status == Status::Attached);
    if pinning_attached {
        assert!(
            o.status.success(),
            "kernel probes attached, validate should pass: {}",
            stderr(&o)
        );
    } else {
        // No fentry, no kprobes (this host): the kernel families are
        // unavailable with reasons, and the exit status says so.
        assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
        let err = stderr(&o);
        // One line says it, besides the progress lines of each workload
        // (`validate: pin-churn: started`, `... done after 1.2 s`).
        let progress = |l: &str| {
            l.starts_with("validate: ")
                && (l.ends_with(": started") || l.rsplit_once(" after ").is_some_and(|(_, t)| t.ends_with(" s")))
        };
        assert_eq!(err.trim_end().lines().filter(|l| !progress(l)).count(), 1, "{err}");
        assert!(err.contains("kernel probe families unavailable: pinning"), "{err}");
        for c in r.coverage.iter().filter(|c| c.family == Family::Pinning) {
            assert_eq!(c.status, Status::Unavailable);
            assert!(c.reason.as_deref().is_some_and(|s| !s.is_empty()), "{c:?}");
        }
    }
}
