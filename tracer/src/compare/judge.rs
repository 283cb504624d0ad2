//! Judgement: pairs the runs of two documents and compares their metrics
//! against the thresholds.
use std::collections::BTreeMap;

use super::{
    BwPoint, Comparison, Document, Limits, LostProbe, Metrics, Row, Status, Thresholds, TransportChange, WorkloadCmp,
    profile,
};
use crate::report::Report;
use crate::units::{ns, size_label};

fn pct_change(a: f64, b: f64) -> Option<f64> {
    (a != 0.0).then(|| (b - a) * 100.0 / a.abs())
}

fn fmt_pct(c: Option<f64>) -> String {
    c.map_or("-".into(), |c| format!("{c:+.1}%"))
}

/// A metric the baseline has and the current run lacks: a regression (the
/// work it measured was not done, or not seen).
fn missing(metric: String, baseline: String) -> Row {
    Row {
        metric,
        baseline,
        current: "not seen".into(),
        change: "missing".into(),
        limit: "present".into(),
        status: Status::Regression,
    }
}

/// A metric where up is bad: regression when it grows by more than `pct`.
/// Falling to 0 from a positive value is a regression too, not an
/// improvement: the workload ran, so what it counted went unseen.
fn up_is_bad(metric: String, a: f64, b: f64, pct: f64, fmt: impl Fn(f64) -> String) -> Row {
    let c = pct_change(a, b);
    let status = match c {
        _ if a > 0.0 && b == 0.0 => Status::Regression,
        Some(c) if c > pct => Status::Regression,
        Some(c) if c < -pct => Status::Better,
        _ => Status::Ok,
    };
    Row {
        metric,
        baseline: fmt(a),
        current: fmt(b),
        change: fmt_pct(c),
        limit: if a > 0.0 && b == 0.0 {
            "falling to 0".into()
        } else {
            format!("+{pct}%")
        },
        status,
    }
}

/// What changed between two runs of one workload: its rows (in the order
/// the sections show them), its transport changes and both runs' metrics.
type Compared = (Vec<Row>, Vec<TransportChange>, Metrics, Metrics);

fn compare_runs(name: &str, base: &Report, cur: &Report, l: &Limits) -> Result<Compared, String> {
    let a = Metrics::of(base).map_err(|e| format!("could not compare: workload {name} of the baseline: {e}"))?;
    let b = Metrics::of(cur).map_err(|e| format!("could not compare: workload {name} of the current run: {e}"))?;
    let mut rows = Vec::new();
    let mut changes = Vec::new();
    verdict_rows(name, &a, &b, &mut rows, &mut changes);
    transport_rows(name, &a, &b, &mut rows, &mut changes);
    path_rows(name, &a, &b, &mut rows, &mut changes);
    operation_rows(&a, &b, &mut rows);
    rows.extend(staged_row(&a, &b, l));
    registration_rows(&a, &b, l, &mut rows);
    rows.extend(cpu_row(&a, &b, l));
    fabric_rows(&a, &b, l, &mut rows);
    bandwidth_rows(&a, &b, l, &mut rows);
    latency_rows(&a, &b, l, &mut rows);
    Ok((rows, changes, a, b))
}

/// Transport verdicts: any change in the mix is a failure.
fn verdict_rows(name: &str, a: &Metrics, b: &Metrics, rows: &mut Vec<Row>, changes: &mut Vec<TransportChange>) {
    if a.verdicts.is_empty() && b.verdicts.is_empty() {
        return;
    }
    let changed = a.verdicts != b.verdicts;
    if changed {
        changes.push(TransportChange {
            workload: name.into(),
            what: "verdicts".into(),
            baseline: a.verdict_mix(),
            current: b.verdict_mix(),
        });
    }
    rows.push(Row {
        metric: "transport verdicts".into(),
        baseline: a.verdict_mix(),
        current: b.verdict_mix(),
        change: if changed { "changed".into() } else { "same".into() },
        limit: "any change".into(),
        status: if changed { Status::Regression } else { Status::Ok },
    });
}

/// Per-path transports, for paths both runs had: a path whose transport
/// changed (a GET that went from cuda_ipc to tcp) is a regression even
/// where the process's verdict mix stayed the same.
fn path_rows(name: &str, a: &Metrics, b: &Metrics, rows: &mut Vec<Row>, changes: &mut Vec<TransportChange>) {
    let fmt = |m: &BTreeMap<String, u64>| {
        m.iter()
            .map(|(t, n)| format!("{t} x{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (path, ta) in &a.path_transports {
        let Some(tb) = b.path_transports.get(path) else {
            continue;
        };
        if ta.keys().ne(tb.keys()) {
            changes.push(TransportChange {
                workload: name.into(),
                what: format!("path {path}"),
                baseline: fmt(ta),
                current: fmt(tb),
            });
            rows.push(Row {
                metric: format!("path {path} transport"),
                baseline: fmt(ta),
                current: fmt(tb),
                change: "changed".into(),
                limit: "any change".into(),
                status: Status::Regression,
            });
        }
    }
}

/// Per-operation transports, for operations both runs made.
fn transport_rows(name: &str, a: &Metrics, b: &Metrics, rows: &mut Vec<Row>, changes: &mut Vec<TransportChange>) {
    for (op, ta) in &a.op_transports {
        let Some(tb) = b.op_transports.get(op) else { continue };
        let (sa, sb): (Vec<&String>, Vec<&String>) = (ta.keys().collect(), tb.keys().collect());
        if sa != sb {
            let fmt = |m: &BTreeMap<String, u64>| {
                m.iter()
                    .map(|(t, n)| format!("{t} ({n})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            changes.push(TransportChange {
                workload: name.into(),
                what: op.clone(),
                baseline: fmt(ta),
                current: fmt(tb),
            });
            rows.push(Row {
                metric: format!("{op} transport"),
                baseline: fmt(ta),
                current: fmt(tb),
                change: "changed".into(),
                limit: "any change".into(),
                status: Status::Regression,
            });
        }
    }
}

/// Operations the baseline made and the current run did not (a probe
/// point that went, a code path no longer taken): regressions. New ones
/// are shown.
fn operation_rows(a: &Metrics, b: &Metrics, rows: &mut Vec<Row>) {
    for (op, ta) in &a.op_transports {
        if !b.op_transports.contains_key(op) {
            rows.push(missing(format!("{op} calls"), ta.values().sum::<u64>().to_string()));
        }
    }
    for (op, tb) in &b.op_transports {
        if !a.op_transports.contains_key(op) {
            rows.push(Row {
                metric: format!("{op} calls"),
                baseline: "not seen".into(),
                current: tb.values().sum::<u64>().to_string(),
                change: "-".into(),
                limit: "-".into(),
                status: Status::Info,
            });
        }
    }
}

/// Host-staged share of moved bytes, in points.
fn staged_row(a: &Metrics, b: &Metrics, l: &Limits) -> Option<Row> {
    Some(match (a.staged_pct(), b.staged_pct()) {
        (Some(x), Some(y)) => {
            let d = y - x;
            Row {
                metric: "host-staged share of bytes".into(),
                baseline: format!("{x:.2}%"),
                current: format!("{y:.2}%"),
                change: format!("{d:+.2} pt"),
                limit: format!("+{} pt", l.staged_ratio_increase_points),
                status: if d > l.staged_ratio_increase_points {
                    Status::Regression
                } else if d < -l.staged_ratio_increase_points {
                    Status::Better
                } else {
                    Status::Ok
                },
            }
        }
        (None, None) => return None,
        (Some(x), None) => missing("host-staged share of bytes".into(), format!("{x:.2}%")),
        (x, y) => Row {
            metric: "host-staged share of bytes".into(),
            baseline: x.map_or("no bytes moved".into(), |x| format!("{x:.2}%")),
            current: y.map_or("no bytes moved".into(), |y| format!("{y:.2}%")),
            change: "-".into(),
            limit: "-".into(),
            status: Status::Info,
        },
    })
}

/// Registrations, and their rate.
fn registration_rows(a: &Metrics, b: &Metrics, l: &Limits, rows: &mut Vec<Row>) {
    if a.registrations == 0 && b.registrations == 0 {
        return;
    }
    rows.push(up_is_bad(
        "registrations".into(),
        a.registrations as f64,
        b.registrations as f64,
        l.registrations_increase_pct,
        |v| format!("{v:.0}"),
    ));
    let rate = |m: &Metrics| (m.duration_s > 0.0).then(|| m.registrations as f64 / m.duration_s);
    if let (Some(x), Some(y)) = (rate(a), rate(b)) {
        rows.push(Row {
            metric: "registration rate".into(),
            baseline: format!("{x:.0}/s"),
            current: format!("{y:.0}/s"),
            change: fmt_pct(pct_change(x, y)),
            limit: "-".into(),
            status: Status::Info,
        });
    }
}

/// CPU seconds of the traced processes per GB moved.
fn cpu_row(a: &Metrics, b: &Metrics, l: &Limits) -> Option<Row> {
    const METRIC: &str = "CPU per GB moved (traced processes)";
    match (a.cpu_per_gb(), b.cpu_per_gb()) {
        (Some(x), Some(y)) => Some(up_is_bad(METRIC.into(), x, y, l.cpu_per_gb_increase_pct, |v| {
            format!("{v:.3} s/GB")
        })),
        (Some(x), None) => Some(missing(METRIC.into(), format!("{x:.3} s/GB"))),
        _ => None,
    }
}

/// A loss rate of the network where up is bad: a regression once the
/// current run's is above the network's noise (`lossy`) and grew more than
/// the limit, or was at the noise floor before.
fn loss_row(metric: &str, a: f64, b: f64, lossy: (bool, bool), pct: f64, fmt: impl Fn(f64) -> String) -> Row {
    let c = pct_change(a, b);
    let status = match c {
        _ if lossy.1 && !lossy.0 => Status::Regression,
        Some(c) if lossy.1 && c > pct => Status::Regression,
        _ if lossy.0 && !lossy.1 => Status::Better,
        _ => Status::Ok,
    };
    Row {
        metric: metric.into(),
        baseline: fmt(a),
        current: fmt(b),
        change: fmt_pct(c),
        limit: format!("above the noise and +{pct}%"),
        status,
    }
}

/// The network's losses (TCP retransmissions, RDMA port retries) and the
/// CPU per GB sent over TCP: the network against a fallback.
fn fabric_rows(a: &Metrics, b: &Metrics, l: &Limits, rows: &mut Vec<Row>) {
    use crate::report::fabric::{port_lossy, tcp_lossy};
    if let (Some(x), Some(y)) = (a.retransmits_per_gb(), b.retransmits_per_gb()) {
        let lossy = (
            tcp_lossy(a.tcp_retransmits, a.tcp_sent_bytes),
            tcp_lossy(b.tcp_retransmits, b.tcp_sent_bytes),
        );
        rows.push(loss_row(
            "TCP retransmissions per GB sent",
            x,
            y,
            lossy,
            l.retransmits_increase_pct,
            |v| format!("{v:.1}/GB"),
        ));
    }
    if let (Some(x), Some(y)) = (a.retry_share(), b.retry_share()) {
        let lossy = (
            port_lossy(a.port_retries, a.port_packets),
            port_lossy(b.port_retries, b.port_packets),
        );
        rows.push(loss_row(
            "RDMA port retries per packet",
            x,
            y,
            lossy,
            l.retransmits_increase_pct,
            |v| format!("{:.4}%", v * 100.0),
        ));
    }
    const CPU: &str = "CPU per GB sent over TCP";
    match (a.tcp_cpu_per_gb(), b.tcp_cpu_per_gb()) {
        (Some(x), Some(y)) => rows.push(up_is_bad(CPU.into(), x, y, l.cpu_per_gb_increase_pct, |v| {
            format!("{v:.3} s/GB")
        })),
        (Some(x), None) => rows.push(missing(CPU.into(), format!("{x:.3} s/GB"))),
        _ => {}
    }
}

/// Bandwidth per series and size; CPU per GB at each series' largest size.
fn bandwidth_rows(a: &Metrics, b: &Metrics, l: &Limits, rows: &mut Vec<Row>) {
    for (series, pa) in &a.bandwidth {
        let metric = |p: &BwPoint| format!("{series} {} bandwidth", size_label(p.size));
        let Some(pb) = b.bandwidth.get(series) else {
            for p in pa {
                rows.push(missing(metric(p), format!("{:.2} GB/s", p.gbps)));
            }
            continue;
        };
        for p in pa {
            let Some(q) = pb.iter().find(|q| q.size == p.size) else {
                rows.push(missing(metric(p), format!("{:.2} GB/s", p.gbps)));
                continue;
            };
            let c = pct_change(p.gbps, q.gbps);
            let status = match c {
                _ if p.gbps > 0.0 && q.gbps == 0.0 => Status::Regression,
                Some(c) if c < -l.bandwidth_decrease_pct => Status::Regression,
                Some(c) if c > l.bandwidth_decrease_pct => Status::Better,
                _ => Status::Ok,
            };
            rows.push(Row {
                metric: metric(p),
                baseline: format!("{:.2} GB/s", p.gbps),
                current: format!("{:.2} GB/s", q.gbps),
                change: fmt_pct(c),
                limit: format!("-{}%", l.bandwidth_decrease_pct),
                status,
            });
        }
        if let (Some(p), Some(q)) = (pa.last(), pb.iter().find(|q| Some(q.size) == pa.last().map(|p| p.size)))
            && let (Some(x), Some(y)) = (p.cpu_s_per_gb, q.cpu_s_per_gb)
        {
            rows.push(up_is_bad(
                format!("{series} {} CPU per GB", size_label(p.size)),
                x,
                y,
                l.cpu_per_gb_increase_pct,
                |v| format!("{v:.4} s/GB"),
            ));
        }
    }
}

/// Latency percentiles of each (operation, transport) with enough samples.
fn latency_rows(a: &Metrics, b: &Metrics, l: &Limits, rows: &mut Vec<Row>) {
    for (key, x) in &a.latency {
        let Some(y) = b.latency.get(key) else { continue };
        if x.count < l.latency_min_samples || y.count < l.latency_min_samples {
            continue;
        }
        for (label, pa, pb, limit) in [
            ("p50", x.p50, y.p50, l.latency_p50_increase_pct),
            ("p99", x.p99, y.p99, l.latency_p99_increase_pct),
        ] {
            let c = pct_change(pa as f64, pb as f64);
            let big = pa.abs_diff(pb) >= l.latency_min_increase_ns;
            let few = label == "p99" && (x.count < l.latency_p99_min_samples || y.count < l.latency_p99_min_samples);
            let status = match c {
                _ if few => Status::Info,
                Some(c) if c > limit && big => Status::Regression,
                Some(c) if c < -limit && big => Status::Better,
                _ => Status::Ok,
            };
            rows.push(Row {
                metric: format!(
                    "{key} latency {label}{}",
                    if x.exact && y.exact { "" } else { " (from report)" }
                ),
                baseline: ns(pa),
                current: ns(pb),
                change: fmt_pct(c),
                limit: if few {
                    format!("< {} samples", l.latency_p99_min_samples)
                } else {
                    format!("+{limit}% and +{}", ns(l.latency_min_increase_ns))
                },
                status,
            });
        }
    }
}

/// Compares two documents. Profiles that differ are refused unless
/// `allow_profile_change`; the error is one line.
pub fn compare(
    base: &Document,
    cur: &Document,
    t: &Thresholds,
    allow_profile_change: bool,
) -> Result<Comparison, String> {
    let (pa, pc) = (&base.baseline.profile, &cur.baseline.profile);
    let profile_diffs = pa.diff(pc);
    let identity: Vec<&profile::Difference> = profile_diffs
        .iter()
        .filter(|d| !d.unknown && !d.field.starts_with("probe "))
        .collect();
    if !identity.is_empty() && !allow_profile_change {
        return Err(format!(
            "the profiles differ ({}); pass --allow-profile-change to compare anyway",
            identity
                .iter()
                .map(|d| format!("{}: {} -> {}", d.field, d.baseline, d.current))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    let mut notes = Vec::new();
    let lost_probes = pa
        .probes
        .iter()
        .filter(|(_, v)| v.starts_with("attached"))
        .filter_map(|(p, v)| {
            let now = pc.probes.get(p).map_or("absent from catalog", String::as_str);
            (!now.starts_with("attached")).then(|| LostProbe {
                point: p.clone(),
                baseline: v.clone(),
                current: now.to_string(),
            })
        })
        .collect();
    // Pair runs by workload name; two single runs are paired whatever their names.
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    let mut missing = Vec::new();
    let (rb, rc) = (&base.baseline.runs, &cur.baseline.runs);
    if rb.len() == 1 && rc.len() == 1 {
        if rb[0].workload != rc[0].workload {
            notes.push(format!(
                "comparing workload '{}' of the baseline with '{}' of the current run",
                rb[0].workload, rc[0].workload
            ));
        }
        pairs.push((0, 0));
    } else {
        for (i, r) in rb.iter().enumerate() {
            match rc.iter().position(|c| c.workload == r.workload) {
                Some(j) => pairs.push((i, j)),
                None => missing.push(r.workload.clone()),
            }
        }
        for c in rc {
            if !rb.iter().any(|r| r.workload == c.workload) {
                notes.push(format!(
                    "workload '{}' is not in the baseline: not compared",
                    c.workload
                ));
            }
        }
    }
    let mut workloads = Vec::new();
    let mut transport_changes = Vec::new();
    let mut probe_lost_fails = false;
    for (i, j) in pairs {
        let (r, c) = (&rb[i], &rc[j]);
        let limits = t.for_workload(&r.workload);
        probe_lost_fails |= limits.probe_lost_fails;
        let (rows, changes, base_m, cur_m) = compare_runs(&r.workload, &base.reports[i], &cur.reports[j], &limits)?;
        transport_changes.extend(changes);
        workloads.push(WorkloadCmp {
            name: r.workload.clone(),
            current_name: (c.workload != r.workload).then(|| c.workload.clone()),
            rows,
            base: base_m,
            cur: cur_m,
        });
    }
    if rb.is_empty() || workloads.is_empty() {
        probe_lost_fails = t.for_workload("").probe_lost_fails;
    }
    Ok(Comparison {
        baseline: base.name.clone(),
        current: cur.name.clone(),
        baseline_profile: pa.clone(),
        current_profile: pc.clone(),
        profile_diffs,
        lost_probes,
        probe_lost_fails,
        transport_changes,
        workloads,
        notes,
        missing_fails: true,
        missing,
    })
}
