//! The signals section, with the probe coverage behind each signal, and
//! the per-point coverage table (`-v`).
use super::*;

/// Points of one family with one outcome: the status, the key they share
/// (`via X`, or the refusal with each point's own name as `<point>`), the
/// first point's own text, and the points.
struct Group<'a> {
    status: Status,
    key: String,
    first: String,
    points: Vec<&'a str>,
}

/// `reason` with `point` as a word replaced by `<point>`: refusals that
/// differ only by the point they name (`unknown BTF type \`f\``) are one.
pub(super) fn generic(reason: &str, point: &str) -> String {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    let mut out = String::new();
    let mut rest = reason;
    while let Some(i) = rest.find(point) {
        let (before, after) = (rest[..i].chars().next_back(), rest[i + point.len()..].chars().next());
        out.push_str(&rest[..i]);
        out.push_str(if word(before) || word(after) { point } else { "<point>" });
        rest = &rest[i + point.len()..];
    }
    out.push_str(rest);
    out
}

/// Coverage rows of one family grouped by outcome, the largest group of
/// each status first.
fn coverage_groups<'a>(r: &'a Report, family: Family) -> Vec<Group<'a>> {
    let mut groups: Vec<Group<'a>> = Vec::new();
    for c in r.coverage.iter().filter(|c| c.family == family) {
        let (key, own) = match c.status {
            Status::Attached => (
                format!("via {}", c.via.unwrap_or("?")),
                format!("via {}", c.via.unwrap_or("?")),
            ),
            Status::Unavailable => {
                let reason = c.reason.clone().unwrap_or_else(|| "unknown".into());
                (generic(&reason, &c.point), reason)
            }
        };
        match groups.iter_mut().find(|g| g.status == c.status && g.key == key) {
            Some(g) => g.points.push(&c.point),
            None => groups.push(Group {
                status: c.status,
                key,
                first: own,
                points: vec![&c.point],
            }),
        }
    }
    groups.sort_by_key(|g| std::cmp::Reverse(g.points.len()));
    groups
}

/// `io_uring_register via tracepoint`, `14 points: reason`.
fn group_text(g: &Group<'_>) -> String {
    match (g.status, g.points.as_slice()) {
        (Status::Attached, [one]) => format!("{one} {}", g.key),
        (Status::Attached, many) => format!("{} points {}", many.len(), g.key),
        (Status::Unavailable, [one]) if g.first.starts_with(one) => g.first.clone(),
        (Status::Unavailable, [one]) => format!("{one}: {}", g.first),
        (Status::Unavailable, many) => format!("{} points: {}", many.len(), g.key),
    }
}

/// Refusals already written in the block, with the line that wrote them.
type Seen = Vec<(String, String)>;

/// The unavailable points of a family on one line: the largest group's
/// refusal, once in the block (a later family refused alike points to the
/// line above), and how many points were refused otherwise (each with -v).
fn unavailable_line(groups: &[Group<'_>], what: &str, seen: &mut Seen) -> Option<String> {
    let mut refused = groups.iter().filter(|g| g.status == Status::Unavailable);
    let first = refused.next()?;
    let others: usize = refused.map(|g| g.points.len()).sum();
    let text = match seen.iter().find(|(k, _)| *k == first.key) {
        Some((_, line)) => match first.points.as_slice() {
            [one] => format!("{one}: as {line} (above)"),
            many => format!("{} points: as {line} (above)", many.len()),
        },
        None => {
            // `kernel page pinning: calls, pages, latency` -> `kernel page pinning`.
            seen.push((first.key.clone(), what.split(':').next().unwrap_or(what).to_string()));
            group_text(first)
        }
    };
    Some(match others {
        0 => text,
        n => format!(
            "{text}; {n} more point{} refused otherwise (-v)",
            if n == 1 { "" } else { "s" }
        ),
    })
}

/// Signals, with the probe coverage behind each one grouped by family and
/// outcome: one line per family, every unavailable family named with its
/// largest refusal once (each point with `-v`).
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
    let mut seen = Seen::new();
    for s in &r.signals {
        let groups = s.family.map(|f| coverage_groups(r, f)).unwrap_or_default();
        shown.extend(s.family);
        match unavailable_line(&groups, s.signal, &mut seen) {
            Some(u) if s.available => {
                row(o, s.signal, s.source, true, &s.how);
                let _ = writeln!(o, "  {:<46} {:<8} {:<12} also {u}", "", "", "");
            }
            Some(u) => row(o, s.signal, s.source, false, &u),
            None => row(o, s.signal, s.source, s.available, &s.how),
        }
    }
    // Families behind no signal row (process tracking, socket syscalls,
    // procfs counters): a line for what attached, one for what did not.
    let mut rest: Vec<Family> = r
        .coverage
        .iter()
        .map(|c| c.family)
        .filter(|f| !shown.contains(f))
        .collect();
    rest.sort();
    rest.dedup();
    for f in rest {
        let what = match f {
            Family::Sched => "process tracking (fork, exec, exit)",
            Family::Socket => "socket data syscalls (bytes per process)",
            Family::FileIo => "file I/O syscalls and ioctls (bytes per fd)",
            Family::Counters => "procfs counters",
            _ => f.name(),
        };
        let groups = coverage_groups(r, f);
        for g in groups.iter().filter(|g| g.status == Status::Attached) {
            row(o, what, "probe", true, &group_text(g));
        }
        if let Some(u) = unavailable_line(&groups, what, &mut seen) {
            row(o, what, "probe", false, &u);
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
