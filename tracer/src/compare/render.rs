//! Text (terminals) and Markdown (CI job summaries) renderers of a
//! comparison's sections (`sections::sections`).
use std::fmt::Write as _;

use super::{
    Comparison, Status,
    sections::{Section, sections},
};

pub fn text(c: &Comparison) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "gdrtrace compare: baseline {} vs current {}", c.baseline, c.current);
    let _ = writeln!(o, "{}", c.headline());
    for s in sections(c) {
        let title = s.title();
        match s {
            Section::Profile(diffs) => {
                let _ = writeln!(o, "\n{title}");
                for d in diffs {
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
            Section::LostProbes { probes, fails } => {
                let _ = writeln!(
                    o,
                    "\n{title}{}",
                    if fails {
                        " (REGRESSION)"
                    } else {
                        " (allowed by thresholds)"
                    }
                );
                for p in probes {
                    let _ = writeln!(o, "  {:<40} was {}, now {}", p.point, p.baseline, p.current);
                }
            }
            Section::TransportChanges(changes) => {
                let _ = writeln!(o, "\n{title} (REGRESSION)");
                for t in changes {
                    let _ = writeln!(o, "  {:<16} {:<30} {} -> {}", t.workload, t.what, t.baseline, t.current);
                }
            }
            Section::Note(n) => {
                let _ = writeln!(o, "\nnote: {n}");
            }
            Section::Missing { workloads, fails } => {
                let _ = writeln!(
                    o,
                    "\n{title}{}: {}",
                    if fails { " (REGRESSION)" } else { "" },
                    workloads.join(", ")
                );
            }
            Section::OverThreshold(_) | Section::Staging(_) => {}
            Section::Workload(w) => {
                let _ = writeln!(o, "\n{title}");
                let width = w.rows.iter().map(|r| r.metric.len()).max().unwrap_or(6).clamp(6, 60);
                // Values with the range of several runs are wider.
                let vw = w
                    .rows
                    .iter()
                    .flat_map(|r| [r.baseline.len(), r.current.len()])
                    .max()
                    .unwrap_or(0)
                    .clamp(22, 48);
                let _ = writeln!(
                    o,
                    "  {:<width$} {:>vw$} {:>vw$} {:>9} {:>20}  STATUS",
                    "METRIC", "BASELINE", "CURRENT", "CHANGE", "LIMIT"
                );
                for r in &w.rows {
                    let _ = writeln!(
                        o,
                        "  {:<width$} {:>vw$} {:>vw$} {:>9} {:>20}  {}",
                        r.metric,
                        r.baseline,
                        r.current,
                        r.change,
                        r.limit,
                        r.status.name()
                    );
                }
            }
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
    for s in sections(c) {
        let title = s.title();
        match s {
            Section::Profile(diffs) => {
                let _ = writeln!(o, "### {title}\n\n| field | baseline | current |\n|---|---|---|");
                for d in diffs {
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
            Section::LostProbes { probes, .. } => {
                let _ = writeln!(o, "### {title}\n");
                for p in probes {
                    let _ = writeln!(o, "- **{}**: was {}, now {}", p.point, p.baseline, p.current);
                }
                let _ = writeln!(o);
            }
            Section::TransportChanges(changes) => {
                let _ = writeln!(o, "### {title}\n");
                for t in changes {
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
            Section::Note(n) => {
                let _ = writeln!(o, "> {}\n", md_escape(n));
            }
            Section::Missing { workloads, .. } => {
                let _ = writeln!(o, "Missing from the current run: {}\n", workloads.join(", "));
            }
            Section::OverThreshold(rows) => {
                let _ = writeln!(o, "### {title}\n");
                for (w, r) in rows {
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
            Section::Staging(_) => {}
            Section::Workload(w) => {
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
        }
    }
    o
}
