//! The signals section, with the probe coverage behind each signal, and
//! the per-point coverage table (`-v`).
use super::*;

/// Coverage rows of one family grouped by outcome: (status, text, points).
fn coverage_groups<'a>(r: &'a Report, family: Family) -> Vec<(Status, String, Vec<&'a str>)> {
    let mut groups: Vec<(Status, String, Vec<&'a str>)> = Vec::new();
    for c in r.coverage.iter().filter(|c| c.family == family) {
        let key = match c.status {
            Status::Attached => format!("via {}", c.via.unwrap_or("?")),
            Status::Unavailable => c.reason.clone().unwrap_or_else(|| "unknown".into()),
        };
        match groups.iter_mut().find(|(s, k, _)| *s == c.status && *k == key) {
            Some((_, _, points)) => points.push(&c.point),
            None => groups.push((c.status, key, vec![&c.point])),
        }
    }
    groups
}

/// `io_uring_register via tracepoint`, `14 points: reason`.
fn group_text(status: Status, key: &str, points: &[&str]) -> String {
    match (status, points) {
        (Status::Attached, [one]) => format!("{one} {key}"),
        (Status::Attached, many) => format!("{} points {key}", many.len()),
        (Status::Unavailable, [one]) if key.starts_with(one) => key.to_string(),
        (Status::Unavailable, [one]) => format!("{one}: {key}"),
        (Status::Unavailable, many) => format!("{} points: {key}", many.len()),
    }
}

/// Signals, with the probe coverage behind each one grouped by family and
/// outcome: one line per family, every unavailable family named with its
/// reason (each point with `detail`).
pub(super) fn signals(o: &mut String, r: &Report) {
    let _ = writeln!(
        o,
        "Signals (probe points grouped by family and outcome; each point with -v and in the JSON)"
    );
    let row = |o: &mut String, signal: &str, source: &str, available: bool, how: &str| {
        let state = if available { "measured" } else { "unavailable" };
        let _ = writeln!(o, "  {signal:<46} {source:<8} {state:<12} {how}");
    };
    let mut shown = Vec::new();
    for s in &r.signals {
        let groups = s.family.map(|f| coverage_groups(r, f)).unwrap_or_default();
        shown.extend(s.family);
        let unavailable: Vec<String> = groups
            .iter()
            .filter(|(st, _, _)| *st == Status::Unavailable)
            .map(|(st, k, p)| group_text(*st, k, p))
            .collect();
        if s.available || unavailable.is_empty() {
            row(o, s.signal, s.source, s.available, &s.how);
            for u in &unavailable {
                let _ = writeln!(o, "  {:<46} {:<8} {:<12} also {u}", "", "", "");
            }
        } else {
            row(o, s.signal, s.source, false, &unavailable[0]);
            for u in &unavailable[1..] {
                let _ = writeln!(o, "  {:<46} {:<8} {:<12} {u}", "", "", "");
            }
        }
    }
    // Families behind no signal row (process tracking, socket syscalls,
    // procfs counters): one line per outcome, so nothing unavailable hides.
    let mut rest: Vec<Family> = r
        .coverage
        .iter()
        .map(|c| c.family)
        .filter(|f| !shown.contains(f))
        .collect();
    rest.sort();
    rest.dedup();
    for f in rest {
        for (st, key, points) in coverage_groups(r, f) {
            let what = match f {
                Family::Sched => "process tracking (fork, exec, exit)",
                Family::Socket => "socket data syscalls (bytes per process)",
                Family::FileIo => "file I/O syscalls and ioctls (bytes per fd)",
                Family::Counters => "procfs counters",
                _ => f.name(),
            };
            row(o, what, "probe", st == Status::Attached, &group_text(st, &key, &points));
        }
    }
    let _ = writeln!(o);
}

/// The full coverage table, one row per probe point (`-v`).
pub(super) fn coverage_detail(o: &mut String, r: &Report) {
    let _ = writeln!(o, "Probe coverage");
    for c in &r.coverage {
        let _ = writeln!(o, "  {:<36} {:<10} {}", c.point, c.family.name(), c.summary());
        if c.status == Status::Attached {
            for d in &c.detail {
                let _ = writeln!(o, "  {:<36} {:<10}   {d}", "", "");
            }
        }
    }
    let _ = writeln!(o);
}
