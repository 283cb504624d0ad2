//! Text (terminals) and Markdown (CI job summaries) renderings of a
//! comparison. Order: profile differences, probe points that became
//! unavailable, transport changes, then each workload's metrics.
use std::fmt::Write as _;

use super::{Comparison, Status};

fn rows_of(c: &Comparison, regressions_only: bool) -> impl Iterator<Item = (&str, &super::Row)> {
    c.workloads.iter().flat_map(move |w| {
        w.rows
            .iter()
            .filter(move |r| !regressions_only || r.status == Status::Regression)
            .map(move |r| (w.name.as_str(), r))
    })
}

pub fn text(c: &Comparison) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "gdrtrace compare: baseline {} vs current {}", c.baseline, c.current);
    let _ = writeln!(o, "{}", c.headline());
    if !c.profile_diffs.is_empty() {
        let _ = writeln!(o, "\nProfile differences");
        for d in &c.profile_diffs {
            let _ = writeln!(
                o,
                "  {:<40} {} -> {}{}",
                d.field,
                d.baseline,
                d.current,
                if d.unknown { "  (not known on both sides)" } else { "" }
            );
        }
    }
    if !c.lost_probes.is_empty() {
        let _ = writeln!(
            o,
            "\nProbe points no longer available{}",
            if c.probe_lost_fails {
                " (REGRESSION)"
            } else {
                " (allowed by thresholds)"
            }
        );
        for p in &c.lost_probes {
            let _ = writeln!(o, "  {:<40} was {}, now {}", p.point, p.baseline, p.current);
        }
    }
    if !c.transport_changes.is_empty() {
        let _ = writeln!(o, "\nTransport changes (REGRESSION)");
        for t in &c.transport_changes {
            let _ = writeln!(o, "  {:<16} {:<30} {} -> {}", t.workload, t.what, t.baseline, t.current);
        }
    }
    for n in &c.notes {
        let _ = writeln!(o, "\nnote: {n}");
    }
    if !c.missing.is_empty() {
        let _ = writeln!(
            o,
            "\nWorkloads of the baseline missing from the current run{}: {}",
            if c.missing_fails { " (REGRESSION)" } else { "" },
            c.missing.join(", ")
        );
    }
    for w in &c.workloads {
        let title = match &w.current_name {
            Some(cur) => format!("{} vs {cur}", w.name),
            None => w.name.clone(),
        };
        let _ = writeln!(o, "\nWorkload {title}");
        let width = w.rows.iter().map(|r| r.metric.len()).max().unwrap_or(6).clamp(6, 60);
        let _ = writeln!(
            o,
            "  {:<width$} {:>22} {:>22} {:>9} {:>20}  STATUS",
            "METRIC", "BASELINE", "CURRENT", "CHANGE", "LIMIT"
        );
        for r in &w.rows {
            let _ = writeln!(
                o,
                "  {:<width$} {:>22} {:>22} {:>9} {:>20}  {}",
                r.metric,
                r.baseline,
                r.current,
                r.change,
                r.limit,
                r.status.name()
            );
        }
    }
    let _ = writeln!(o, "\n{} (exit {})", c.headline(), c.exit_code());
    o
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

pub fn markdown(c: &Comparison) -> String {
    let mut o = String::new();
    let verdict = if c.exit_code() == 0 {
        "no regression"
    } else {
        "REGRESSION"
    };
    let _ = writeln!(o, "## gdrtrace compare: {verdict}\n");
    let _ = writeln!(o, "Baseline `{}` vs current `{}`.\n", c.baseline, c.current);
    let _ = writeln!(o, "**{}** (exit {})\n", md_escape(&c.headline()), c.exit_code());
    if !c.profile_diffs.is_empty() {
        let _ = writeln!(
            o,
            "### Profile differences\n\n| field | baseline | current |\n|---|---|---|"
        );
        for d in &c.profile_diffs {
            let _ = writeln!(
                o,
                "| {} | {} | {}{} |",
                md_escape(&d.field),
                md_escape(&d.baseline),
                md_escape(&d.current),
                if d.unknown { " (not known on both sides)" } else { "" }
            );
        }
        let _ = writeln!(o);
    }
    if !c.lost_probes.is_empty() {
        let _ = writeln!(o, "### Probe points no longer available\n");
        for p in &c.lost_probes {
            let _ = writeln!(o, "- **{}**: was {}, now {}", p.point, p.baseline, p.current);
        }
        let _ = writeln!(o);
    }
    if !c.transport_changes.is_empty() {
        let _ = writeln!(o, "### Transport changes\n");
        for t in &c.transport_changes {
            let _ = writeln!(
                o,
                "- **{}** {}: {} → {}",
                t.workload,
                md_escape(&t.what),
                md_escape(&t.baseline),
                md_escape(&t.current)
            );
        }
        let _ = writeln!(o);
    }
    for n in &c.notes {
        let _ = writeln!(o, "> {}\n", md_escape(n));
    }
    if !c.missing.is_empty() {
        let _ = writeln!(o, "Missing from the current run: {}\n", c.missing.join(", "));
    }
    let regressions: Vec<_> = rows_of(c, true).collect();
    if !regressions.is_empty() {
        let _ = writeln!(o, "### Over threshold\n");
        for (w, r) in regressions {
            let _ = writeln!(
                o,
                "- {w}: {} {} → {} ({}, limit {})",
                md_escape(&r.metric),
                md_escape(&r.baseline),
                md_escape(&r.current),
                r.change,
                r.limit
            );
        }
        let _ = writeln!(o);
    }
    for w in &c.workloads {
        let _ = writeln!(o, "<details><summary>{} ({} metrics)</summary>\n", w.name, w.rows.len());
        let _ = writeln!(
            o,
            "| metric | baseline | current | change | limit | status |\n|---|---|---|---|---|---|"
        );
        for r in &w.rows {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} |",
                md_escape(&r.metric),
                md_escape(&r.baseline),
                md_escape(&r.current),
                r.change,
                r.limit,
                if r.status == Status::Regression {
                    "**REGRESSION**"
                } else {
                    r.status.name()
                }
            );
        }
        let _ = writeln!(o, "\n</details>\n");
    }
    o
}
