//! The probe availability matrix of each kernel the VM tier booted, side by
//! side (from each guest's `gdrtrace doctor --json`), with every difference
//! spelled out: which strategy attached on one kernel and why it did not on
//! the other. A difference without a reason fails the run.
use std::{collections::BTreeMap, fmt::Write as _, fs, path::Path};

use anyhow::{Context, Result};

use crate::documents::{Coverage, Doctor, Status};

/// One coverage cell: `fentry/fexit`, or `unavailable: reason`.
fn cell(row: &Coverage) -> (String, Option<String>) {
    match row.status {
        Status::Attached => {
            // A fallback strategy: say why the preferred ones were refused.
            let tried: Vec<String> = row
                .tried
                .iter()
                .map(|t| format!("{} refused: {}", t.strategy, t.error))
                .collect();
            (
                row.via.as_deref().unwrap_or("?").to_string(),
                (!tried.is_empty()).then(|| tried.join("; ")),
            )
        }
        Status::Unavailable => {
            let reason = row.reason.clone().filter(|r| !r.is_empty());
            ("unavailable".to_string(), reason)
        }
    }
}

/// Builds the side-by-side matrix for `releases` (results under `dir`).
/// Returns the Markdown text and the number of unexplained differences.
pub fn build(dir: &Path, releases: &[String]) -> Result<(String, usize)> {
    let mut cols: Vec<(String, BTreeMap<String, Coverage>)> = Vec::new();
    for r in releases {
        let path = dir.join(r).join("doctor.json");
        let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let v: Doctor = serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        let rows = v.coverage.into_iter().map(|c| (c.point.clone(), c)).collect();
        cols.push((r.clone(), rows));
    }
    let mut points: Vec<String> = Vec::new();
    for (_, rows) in &cols {
        for p in rows.keys() {
            if !points.contains(p) {
                points.push(p.clone());
            }
        }
    }
    let mut md = String::new();
    let _ = writeln!(md, "# Probe availability by kernel\n");
    let _ = write!(md, "| probe point |");
    for (r, _) in &cols {
        let _ = write!(md, " {r} |");
    }
    let _ = writeln!(md);
    let _ = writeln!(md, "|---|{}", "---|".repeat(cols.len()));
    let mut diffs = Vec::new();
    let mut unexplained = 0;
    for p in &points {
        let cells: Vec<(String, Option<String>)> = cols
            .iter()
            .map(|(_, rows)| rows.get(p).map_or(("absent from catalog".to_string(), None), cell))
            .collect();
        let _ = write!(md, "| {p} |");
        for (c, _) in &cells {
            let _ = write!(md, " {c} |");
        }
        let _ = writeln!(md);
        if cells.windows(2).any(|w| w[0].0 != w[1].0) {
            let mut line = format!("- **{p}**:");
            for ((r, _), (c, reason)) in cols.iter().zip(&cells) {
                match reason {
                    Some(why) if c != "unavailable" => {
                        let _ = write!(line, " {r}: attached via {c} ({why});");
                    }
                    Some(why) => {
                        let _ = write!(line, " {r}: {c} ({why});");
                    }
                    None if c == "unavailable" => {
                        unexplained += 1;
                        let _ = write!(line, " {r}: unavailable WITHOUT A REASON;");
                    }
                    None => {
                        let _ = write!(line, " {r}: attached via {c};");
                    }
                }
            }
            diffs.push(line);
        }
    }
    let _ = writeln!(md, "\n## Differences\n");
    if diffs.is_empty() {
        let _ = writeln!(md, "None: every probe point attached the same way on every kernel.");
    }
    for d in diffs {
        let _ = writeln!(md, "{d}");
    }
    Ok((md, unexplained))
}
