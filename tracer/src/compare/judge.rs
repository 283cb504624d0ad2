//! Judgement: pairs the runs of two documents and compares their metrics
//! against the thresholds.
use std::collections::BTreeMap;

use super::{
    Comparison, Document, Limits, LostProbe, Metrics, Numbers, Row, Status, Thresholds, TransportChange, WorkloadCmp,
    numeric::{self, fmt_pct, missing, pct_change},
    profile,
    spread::{Sample, Worse},
};
use crate::report::Report;

/// What changed between two runs of one workload: its rows (in the order
/// the sections show them), its transport changes and both runs' metrics.
type Compared = (Vec<Row>, Vec<TransportChange>, Metrics, Metrics);

fn compare_runs(name: &str, base: &[&Report], cur: &[&Report], l: &Limits) -> Result<Compared, String> {
    let of = |side: &str, rs: &[&Report]| {
        rs.iter()
            .map(|r| Metrics::of(r).map_err(|e| format!("could not compare: workload {name} of the {side}: {e}")))
            .collect::<Result<Vec<_>, _>>()
    };
    let a = of("baseline", base)?;
    let b = of("current run", cur)?;
    let (Some(a0), Some(b0)) = (a.first(), b.first()) else {
        return Err(format!("could not compare: workload {name} has no run"));
    };
    // Paths and transports: the baseline's first run against each current
    // run; a change in any of them counts (a fallback in one run of three
    // is a fallback).
    let mut rows = Vec::new();
    let mut changes: Vec<TransportChange> = Vec::new();
    for (k, bk) in b.iter().enumerate() {
        let (mut r, mut c) = (Vec::new(), Vec::new());
        verdict_rows(name, a0, bk, &mut r, &mut c);
        transport_rows(name, a0, bk, &mut r, &mut c);
        path_rows(name, a0, bk, &mut r, &mut c);
        operation_rows(a0, bk, &mut r);
        r.extend(staged_row(a0, bk, l));
        if k == 0 {
            (rows, changes) = (r, c);
            continue;
        }
        for mut row in r.into_iter().filter(|r| r.status == Status::Regression) {
            if !rows
                .iter()
                .any(|x| x.metric == row.metric && x.status == Status::Regression)
            {
                row.metric = format!("{} (run {})", row.metric, k + 1);
                rows.push(row);
            }
        }
        for ch in c {
            if !changes.contains(&ch) {
                changes.push(ch);
            }
        }
    }
    // Measured numbers: every run of each side, against the baseline's spread.
    numeric::registration_rows(&a, &b, l, &mut rows);
    rows.extend(numeric::cpu_row(&a, &b, l));
    fabric_rows(&a, &b, l, &mut rows);
    rows.extend(tcp_cpu_row(&a, &b, l));
    numeric::bandwidth_rows(&a, &b, l, &mut rows);
    numeric::latency_rows(&a, &b, l, &mut rows);
    Ok((rows, changes, a0.clone(), b0.clone()))
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
        num: None,
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
                num: None,
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
                num: None,
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
            let n = ta.values().sum::<u64>();
            rows.push(missing(
                format!("{op} calls"),
                n.to_string(),
                Some(count(Some(n), None)),
            ));
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
                num: Some(count(None, Some(tb.values().sum::<u64>()))),
            });
        }
    }
}

/// Call counts as numbers (`None`: not seen on that side).
fn count(base: Option<u64>, cur: Option<u64>) -> Numbers {
    let s = |n: u64| Sample::of(&[n as f64]);
    Numbers {
        unit: "count".into(),
        baseline: base.and_then(s),
        current: cur.and_then(s),
        change_pct: None,
        bound: None,
    }
}

/// The host-staged share as numbers, in percent.
fn share(x: Option<f64>, y: Option<f64>, points: Option<f64>) -> Numbers {
    let s = |v: Option<f64>| v.and_then(|v| Sample::of(&[v]));
    Numbers {
        unit: "%".into(),
        baseline: s(x),
        current: s(y),
        change_pct: None,
        bound: x.zip(points).map(|(x, p)| super::spread::Bound::Max(x + p)),
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
                num: Some(Numbers {
                    change_pct: None,
                    ..share(Some(x), Some(y), Some(l.staged_ratio_increase_points))
                }),
            }
        }
        (None, None) => return None,
        (Some(x), None) => missing(
            "host-staged share of bytes".into(),
            format!("{x:.2}%"),
            Some(share(Some(x), None, None)),
        ),
        (x, y) => Row {
            metric: "host-staged share of bytes".into(),
            baseline: x.map_or("no bytes moved".into(), |x| format!("{x:.2}%")),
            current: y.map_or("no bytes moved".into(), |y| format!("{y:.2}%")),
            change: "-".into(),
            limit: "-".into(),
            status: Status::Info,
            num: Some(share(x, y, None)),
        },
    })
}

/// One loss measure of the network: its name, its value in a run, and
/// whether a run lost packets above any network's noise (explain's floor).
struct Loss<'a> {
    metric: &'static str,
    unit: &'static str,
    value: &'a dyn Fn(&Metrics) -> Option<f64>,
    lossy: &'a dyn Fn(&Metrics) -> bool,
    fmt: &'a dyn Fn(f64) -> String,
}

impl Loss<'_> {
    /// Over every run of each side: a regression where every current run
    /// lost packets (`lossy`) and every one is past the baseline's range by
    /// the margin of the other measured numbers (a loopback's spurious
    /// retransmissions vary 0-77 between unchanged runs on the development
    /// host); better where every baseline run lost packets and no current
    /// run did.
    fn row(&self, a: &[Metrics], b: &[Metrics], l: &Limits) -> Option<Row> {
        let values = |m: &[Metrics]| m.iter().filter_map(|x| (self.value)(x)).collect::<Vec<_>>();
        let (sa, sb) = (Sample::of(&values(a))?, Sample::of(&values(b))?);
        let rule = numeric::rule(l.retransmits_increase_pct, l);
        let (verdict, bound) = rule.judge(&sa, &sb, Worse::Up);
        let all_lossy = |m: &[Metrics]| !m.is_empty() && m.iter().all(|x| (self.lossy)(x));
        let none_lossy = |m: &[Metrics]| m.iter().all(|x| !(self.lossy)(x));
        let status = match verdict {
            Some(true) if all_lossy(b) => Status::Regression,
            _ if all_lossy(a) && none_lossy(b) => Status::Better,
            _ => Status::Ok,
        };
        let change_pct = pct_change(sa.median, sb.median);
        let limit = match bound {
            super::spread::Bound::Max(x) | super::spread::Bound::Min(x) => {
                format!("above the noise and <= {}", (self.fmt)(x))
            }
        };
        Some(Row {
            metric: self.metric.into(),
            baseline: numeric::shown(&sa, self.fmt),
            current: numeric::shown(&sb, self.fmt),
            change: fmt_pct(change_pct),
            limit,
            status,
            num: Some(Numbers {
                unit: self.unit.into(),
                baseline: Some(sa),
                current: Some(sb),
                change_pct,
                bound: Some(bound),
            }),
        })
    }
}

/// The network's losses (TCP retransmissions, RDMA port retries), each
/// with its own noise floor, over every run of each side (`Loss::row`).
fn fabric_rows(a: &[Metrics], b: &[Metrics], l: &Limits, rows: &mut Vec<Row>) {
    use crate::report::fabric::{port_lossy, tcp_lossy};
    let tcp = Loss {
        metric: "TCP retransmissions per GB sent",
        unit: "1/GB",
        value: &Metrics::retransmits_per_gb,
        lossy: &|m| tcp_lossy(m.tcp_retransmits, m.tcp_sent_bytes),
        fmt: &|v| format!("{v:.1}/GB"),
    };
    let port = Loss {
        metric: "RDMA port retries per packet",
        unit: "ratio",
        value: &Metrics::retry_share,
        lossy: &|m| port_lossy(m.port_retries, m.port_packets),
        fmt: &|v| format!("{:.4}%", v * 100.0),
    };
    rows.extend(tcp.row(a, b, l));
    rows.extend(port.row(a, b, l));
}

/// CPU per GB sent over TCP (the network against a fallback), over every
/// run of each side like the other measured numbers.
fn tcp_cpu_row(a: &[Metrics], b: &[Metrics], l: &Limits) -> Option<Row> {
    if !a.iter().chain(b).all(Metrics::cpu_judgeable) {
        return None;
    }
    let v = |m: &[Metrics]| m.iter().filter_map(Metrics::tcp_cpu_per_gb).collect::<Vec<_>>();
    numeric::Measure {
        metric: "CPU per GB sent over TCP".into(),
        unit: "s/GB",
        fmt: &|v| format!("{v:.3} s/GB"),
        worse: Worse::Up,
        rule: numeric::rule(l.cpu_per_gb_increase_pct, l),
    }
    .row(&v(a), &v(b))
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
        let (rows, changes, base_m, cur_m) = compare_runs(&r.workload, &base.runs_of(i), &cur.runs_of(j), &limits)?;
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
