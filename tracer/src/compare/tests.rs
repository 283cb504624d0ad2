use serde_json::Value;

use super::*;

fn report(transport: &str, p50: u64) -> Value {
    let mut h = crate::stats::new_histogram();
    for i in 0..100 {
        h.record(p50 + i).expect("in range");
    }
    serde_json::json!({
        "schema": "gdrtrace.report/v1",
        "tool_version": "0.1.0",
        "host": {"kernel": "6.1.0-test", "lockdown": "none"},
        "command": ["/x/gdrtrace", "drive", "cuda-copy"],
        "duration_s": 1.0,
        "operations": [{
            "name": "cuMemcpyHtoD", "family": "cuda", "transport": transport, "calls": 100,
            "errors": 0, "bytes": 1u64 << 30, "pages": 0, "evidence": "", "incomplete": false,
            "latency": serde_json::to_value(crate::report::Latency::from_hist(&h)).expect("serializable"),
            "histogram": crate::report::serialize_hist(&h),
        }],
        "coverage": [{"point": "pin_user_pages_fast", "family": "pinning", "status": "attached", "via": "fentry/fexit", "reason": null, "tried": []}],
        "processes": [{"pid": 1, "cpu_seconds": 0.5, "registrations": 0}],
        "verdicts": [],
    })
}

fn doc(r: Value) -> Document {
    let typed = read_report(&r).expect("valid report");
    let name = workload_name(&typed);
    let (baseline, _) = record(
        vec![Run {
            workload: name,
            report: r,
            repeats: Vec::new(),
        }],
        std::slice::from_ref(&typed),
        "test".into(),
    );
    Document {
        name: "t".into(),
        baseline,
        plain_report: false,
        reports: vec![typed],
        repeats: vec![Vec::new()],
    }
}

#[test]
fn exact_percentiles_from_the_serialized_histogram() {
    let m = Metrics::of(&read_report(&report("gpu-host-dma", 10_000)).expect("a report")).expect("metrics");
    let l = &m.latency["cuMemcpyHtoD [gpu-host-dma]"];
    assert!(l.exact);
    assert_eq!(l.count, 100);
    assert!(l.p50 >= 10_040 && l.p50 <= 10_060, "{}", l.p50);
}

#[test]
fn direct_to_staged_is_a_regression_naming_the_change() {
    let c = compare(
        &doc(report("gpu-host-dma", 10_000)),
        &doc(report("host-staged", 10_000)),
        &Thresholds::default(),
        false,
    )
    .expect("same profile");
    assert_eq!(c.exit_code(), 1);
    assert_eq!(c.transport_changes.len(), 1);
    assert!(
        c.headline().contains("gpu-host-dma (100) -> host-staged (100)"),
        "{}",
        c.headline()
    );
    let staged = c.workloads[0]
        .rows
        .iter()
        .find(|r| r.metric == "host-staged share of bytes")
        .expect("staged row");
    assert_eq!(staged.status, Status::Regression);
}

/// Baselines recorded before `gpu-host-dma` named GPU<->pinned copies
/// `host-only`: compared with a report of today, that is no change.
#[test]
fn old_host_only_copies_read_as_gpu_host_dma() {
    let c = compare(
        &doc(report("host-only", 10_000)),
        &doc(report("gpu-host-dma", 10_000)),
        &Thresholds::default(),
        false,
    )
    .expect("same profile");
    assert!(c.transport_changes.is_empty(), "{:?}", c.transport_changes);
    assert_eq!(c.exit_code(), 0, "{}", c.headline());
}

#[test]
fn same_run_is_no_regression_and_latency_threshold_applies() {
    let a = doc(report("gpu-host-dma", 10_000));
    let c = compare(&a, &a, &Thresholds::default(), false).expect("same profile");
    assert_eq!(c.exit_code(), 0, "{:?}", c.workloads[0].rows);
    let slow = doc(report("gpu-host-dma", 20_000));
    let c = compare(&a, &slow, &Thresholds::default(), false).expect("same profile");
    assert_eq!(c.exit_code(), 1);
    assert!(
        c.workloads[0]
            .rows
            .iter()
            .any(|r| r.metric.contains("latency p50") && r.status == Status::Regression)
    );
    let lax = Thresholds::parse("[defaults]\nlatency_p50_increase_pct = 150\nlatency_p99_increase_pct = 150\n")
        .expect("valid");
    assert_eq!(compare(&a, &slow, &lax, false).expect("same").exit_code(), 0);
}

#[test]
fn profile_change_is_refused_unless_allowed() {
    let a = doc(report("gpu-host-dma", 10_000));
    let mut r = report("gpu-host-dma", 10_000);
    r["host"]["kernel"] = "6.12.0-test".into();
    r["coverage"][0]["status"] = "unavailable".into();
    let b = doc(r);
    let e = compare(&a, &b, &Thresholds::default(), false).expect_err("kernel differs");
    assert!(e.contains("kernel: 6.1.0-test -> 6.12.0-test"), "{e}");
    let c = compare(&a, &b, &Thresholds::default(), true).expect("allowed");
    assert_eq!(c.profile_diffs[0].field, "kernel");
    assert_eq!(c.lost_probes.len(), 1);
    assert_eq!(c.exit_code(), 1);
}

#[test]
fn workload_names() {
    let named = |command: &[&str], workloads: Value| {
        let mut r = crate::report::tests_support::empty_report();
        r.command = command.iter().map(|s| s.to_string()).collect();
        r.workloads = serde_json::from_value(workloads).expect("an array");
        workload_name(&r)
    };
    assert_eq!(
        workload_name(&read_report(&report("x", 1)).expect("a report")),
        "cuda-copy"
    );
    assert_eq!(
        named(&["/usr/bin/ib_write_bw", "-d"], serde_json::json!([])),
        "ib_write_bw"
    );
    assert_eq!(
        named(&["/opt/gdrtrace", "attach", "--pid", "7"], serde_json::json!([])),
        "attach"
    );
    assert_eq!(named(&[], serde_json::json!([{"workload": "pin-churn"}])), "pin-churn");
}

/// One model, three renderers: every section the model lays out is headed
/// by its title in each format that shows that kind of section, in the
/// model's order, and every row of every workload is in all three.
#[test]
fn renderers_show_the_sections_of_one_model() {
    use super::sections::{Section, sections};
    let a = doc(report("gpu-host-dma", 10_000));
    let mut r = report("host-staged", 30_000);
    r["host"]["kernel"] = "6.12.0-test".into();
    r["coverage"][0]["status"] = "unavailable".into();
    let c = compare(&a, &doc(r), &Thresholds::default(), true).expect("allowed");
    let model = sections(&c);
    let kinds = |s: &Section| match s {
        Section::Profile(_) => "profile",
        Section::LostProbes { .. } => "lost",
        Section::TransportChanges(_) => "transport",
        Section::Note(_) => "note",
        Section::Missing { .. } => "missing",
        Section::OverThreshold(_) => "over",
        Section::Staging(_) => "staging",
        Section::Workload(_) => "workload",
    };
    let present: Vec<&str> = model.iter().map(kinds).collect();
    for k in ["profile", "lost", "transport", "over", "staging", "workload"] {
        assert!(present.contains(&k), "{k} missing from {present:?}");
    }
    // The kinds each format shows (a plot has no text form; the text and
    // HTML forms list regressions in the workload tables).
    let outputs = [
        (
            "text",
            render::text(&c),
            ["profile", "lost", "transport", "workload"].as_slice(),
        ),
        (
            "markdown",
            render::markdown(&c),
            ["profile", "lost", "transport", "over"].as_slice(),
        ),
        (
            "html",
            html::page(&c),
            ["profile", "lost", "transport", "staging", "workload"].as_slice(),
        ),
    ];
    for (format, out, shown) in &outputs {
        let mut at = 0;
        for s in model.iter().filter(|s| shown.contains(&kinds(s))) {
            let title = s.title();
            let found = out[at..]
                .find(&title)
                .unwrap_or_else(|| panic!("{format}: '{title}' missing or out of order:\n{out}"));
            at += found + title.len();
        }
        for w in &c.workloads {
            assert!(out.contains(&w.name), "{format}: workload {}", w.name);
            for row in &w.rows {
                assert!(out.contains(&row.metric), "{format}: row {}", row.metric);
            }
        }
    }
}

/// A report of one process that sent 1 GB over TCP with `retransmits` and
/// `cpu_seconds` of CPU.
fn tcp_report(retransmits: u64, cpu_seconds: f64) -> Value {
    let mut r = report("gpu-host-dma", 10_000);
    r["processes"][0]["cpu_seconds"] = cpu_seconds.into();
    r["fabric"] = serde_json::json!({"tcp": {"available": true, "how": "tcp_retransmit_skb attached via tracepoint",
        "processes": [{"pid": 1, "comm": "sender", "sockets": 1, "sends": 1000, "bytes_sent": 1_000_000_000u64,
                       "retransmits": retransmits}]}});
    r
}

#[test]
fn retransmissions_and_cpu_per_gb_sent_are_judged() {
    let row = |c: &Comparison, metric: &str| {
        c.workloads[0]
            .rows
            .iter()
            .find(|r| r.metric == metric)
            .unwrap_or_else(|| panic!("no {metric} row: {:?}", c.workloads[0].rows))
            .status
    };
    let judge = |a: Value, b: Value| compare(&doc(a), &doc(b), &Thresholds::default(), false).expect("same profile");
    let lossy = judge(tcp_report(0, 0.5), tcp_report(400, 0.5));
    assert_eq!(row(&lossy, "TCP retransmissions per GB sent"), Status::Regression);
    assert_eq!(row(&lossy, "CPU per GB sent over TCP"), Status::Ok);
    let noise = judge(tcp_report(0, 0.5), tcp_report(3, 0.5));
    assert_eq!(
        row(&noise, "TCP retransmissions per GB sent"),
        Status::Ok,
        "3 retransmissions in a GB are any network's noise"
    );
    let fallback = judge(tcp_report(0, 0.5), tcp_report(0, 1.5));
    assert_eq!(row(&fallback, "TCP retransmissions per GB sent"), Status::Ok);
    assert_eq!(row(&fallback, "CPU per GB sent over TCP"), Status::Regression);
    let healed = judge(tcp_report(400, 0.5), tcp_report(0, 0.5));
    assert_eq!(row(&healed, "TCP retransmissions per GB sent"), Status::Better);
}

/// A path whose transport changed between the runs is a regression, even
/// where the processes' verdict mix is the same (two `mixed` processes).
#[test]
fn a_path_that_changed_transport_is_a_regression() {
    let with_get = |transport: &str| {
        let mut r = report("gpu-host-dma", 10_000);
        let path = |op: &str, t: &str| {
            serde_json::json!({"pid": 1, "comm": "python3", "peer_kind": "ucx-endpoint", "peer": "0x7f00",
                "op": op, "memory": "cuda", "transport": t, "via": "", "calls": 10, "bytes": 1 << 30,
                "host_staged": t == "host-staged", "staged_bytes": 0, "evidence": []})
        };
        r["paths"] = serde_json::json!([path("get", transport), path("put", "ipc/same-device")]);
        r["verdicts"] = serde_json::json!([{"pid": 1, "comm": "python3", "transport": "mixed",
            "host_staged": true, "evidence": []}]);
        r
    };
    let same = compare(
        &doc(with_get("host-staged")),
        &doc(with_get("host-staged")),
        &Thresholds::default(),
        false,
    )
    .expect("same profile");
    assert!(same.transport_changes.is_empty(), "{:?}", same.transport_changes);
    let c = compare(
        &doc(with_get("ipc/same-device")),
        &doc(with_get("host-staged")),
        &Thresholds::default(),
        false,
    )
    .expect("same profile");
    assert_eq!(c.exit_code(), 1);
    assert!(
        c.transport_changes
            .iter()
            .any(|t| t.what == "path python3 get ucx-endpoint cuda" && t.current == "host-staged x1"),
        "{:?}",
        c.transport_changes
    );
}

/// A loopback's spurious retransmissions vary between unchanged runs (0-77
/// in 52 MB on the development host, 2026-12-07): every current run above
/// the noise floor but within the baseline's range is no regression; every
/// current run past the range by the margin is.
#[test]
fn retransmissions_are_judged_against_the_baseline_runs() {
    let runs = |v: &[u64]| doc_runs(&v.iter().map(|n| tcp_report(*n, 0.5)).collect::<Vec<_>>());
    let status = |a: &[u64], b: &[u64]| {
        let c = compare(&runs(a), &runs(b), &Thresholds::default(), false).expect("same profile");
        c.workloads[0]
            .rows
            .iter()
            .find(|r| r.metric == "TCP retransmissions per GB sent")
            .map(|r| r.status)
            .unwrap_or_else(|| panic!("no row: {:?}", c.workloads[0].rows))
    };
    assert_eq!(status(&[39, 0, 8], &[30, 20, 19]), Status::Ok, "within the range");
    assert_eq!(status(&[4, 1, 21], &[12, 38, 1]), Status::Ok, "one current run quiet");
    assert_eq!(status(&[4, 1, 21], &[400, 450, 500]), Status::Regression);
    assert_eq!(status(&[400, 450, 500], &[0, 1, 2]), Status::Better);
}

/// A document whose one workload ran once per report given.
fn doc_runs(runs: &[Value]) -> Document {
    let mut d = doc(runs[0].clone());
    d.baseline.runs[0].repeats = runs[1..].to_vec();
    d.repeats = vec![
        runs[1..]
            .iter()
            .map(|r| read_report(r).expect("valid report"))
            .collect(),
    ];
    d
}

fn latency_row<'c>(c: &'c Comparison, label: &str) -> &'c Row {
    c.workloads[0]
        .rows
        .iter()
        .find(|r| r.metric == format!("cuMemcpyHtoD [gpu-host-dma] latency {label}"))
        .unwrap_or_else(|| panic!("no {label} row: {:?}", c.workloads[0].rows))
}

/// Latency is judged against the spread the baseline's runs showed: a
/// change a single run would call a regression is within a noisy
/// baseline's range, and one past its range by the margin is not.
#[test]
fn latency_is_judged_against_the_baselines_spread() {
    let t = Thresholds::default();
    let r = |p50| report("gpu-host-dma", p50);
    // One run each: 10us -> 40us is +300%, a regression.
    let one = compare(&doc(r(10_000)), &doc(r(40_000)), &t, false).expect("same profile");
    assert_eq!(one.exit_code(), 1, "{}", one.headline());
    // Runs of 10, 20 and 30us: the bound is 30us + max(25% of 20us, the
    // 20us spread) = 50us (each p50 is 50ns above its run's base).
    let base = doc_runs(&[r(10_000), r(20_000), r(30_000)]);
    let c = compare(&base, &doc(r(40_000)), &t, false).expect("same profile");
    assert_eq!(c.exit_code(), 0, "{}", c.headline());
    let p50 = latency_row(&c, "p50");
    assert!(p50.status == Status::Ok && p50.limit.starts_with("<= 50."), "{p50:?}");
    assert_eq!(p50.baseline, "20.1us (10.1us..30.1us)");
    // The JSON carries the numbers, in nanoseconds.
    let j = json::document(&c);
    let m = j
        .metrics
        .iter()
        .find(|m| m.metric == p50.metric)
        .expect("the row in JSON");
    assert_eq!(m.unit.as_deref(), Some("ns"));
    let b = m.baseline.as_ref().expect("a baseline value");
    let (lo, hi) = (b.min.expect("min"), b.max.expect("max"));
    assert_eq!(b.runs, Some(3));
    assert!(
        (10_000.0..10_100.0).contains(&lo)
            && (20_000.0..20_100.0).contains(&b.value)
            && (30_000.0..30_100.0).contains(&hi),
        "{b:?}"
    );
    let limit = m.limit.as_ref().expect("a limit");
    assert_eq!(limit.side, "max");
    assert_eq!(limit.value, hi + (hi - lo).max(0.25 * b.value).max(1000.0), "{limit:?}");
    // Every current run must be past the bound: two slow runs of three
    // are not a regression (a busy machine)...
    let c = compare(&base, &doc_runs(&[r(45_000), r(90_000), r(95_000)]), &t, false).expect("same profile");
    assert_eq!(c.exit_code(), 0, "the best run, 45us, is within: {}", c.headline());
    // ...three are (the best 55us).
    let c = compare(&base, &doc_runs(&[r(56_000), r(55_000), r(90_000)]), &t, false).expect("same profile");
    assert_eq!(c.exit_code(), 1, "{}", c.headline());
    assert_eq!(latency_row(&c, "p50").status, Status::Regression);
}

/// A fallback in one current run of three fails, whatever the others did.
#[test]
fn a_fallback_in_any_current_run_fails() {
    let base = doc_runs(&[
        report("gpu-host-dma", 10_000),
        report("gpu-host-dma", 10_000),
        report("gpu-host-dma", 10_000),
    ]);
    let cur = doc_runs(&[
        report("gpu-host-dma", 10_000),
        report("host-staged", 10_000),
        report("gpu-host-dma", 10_000),
    ]);
    let c = compare(&base, &cur, &Thresholds::default(), false).expect("same profile");
    assert_eq!(c.exit_code(), 1, "{}", c.headline());
    assert_eq!(c.transport_changes.len(), 1, "{:?}", c.transport_changes);
    assert!(
        c.workloads[0]
            .rows
            .iter()
            .any(|r| r.metric == "cuMemcpyHtoD transport (run 2)" && r.status == Status::Regression),
        "{:?}",
        c.workloads[0].rows
    );
}

/// CPU per GB is not judged on runs with less CPU time than the clock's
/// ticks can tell apart: one tick more is no regression.
#[test]
fn cpu_per_gb_needs_enough_cpu_time_to_be_judged() {
    let judge = |a: Value, b: Value| compare(&doc(a), &doc(b), &Thresholds::default(), false).expect("same profile");
    let ticks = judge(tcp_report(0, 0.04), tcp_report(0, 0.05));
    assert!(
        !ticks.workloads[0]
            .rows
            .iter()
            .any(|r| r.metric.starts_with("CPU per GB")),
        "{:?}",
        ticks.workloads[0].rows
    );
}
