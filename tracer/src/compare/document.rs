//! Reading: baselines (`gdrtrace.baseline/v1`: reports plus the profile
//! they were made on) and plain reports, read into the typed report and
//! checked before anything is compared. A baseline keeps its reports as
//! written (`Run::report`, the JSON); what `compare` reads is their typed
//! form (`Document::reports`).
use std::path::Path;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Profile, profile};
use crate::{input::schema_of, report::Report};

pub const SCHEMA: &str = "gdrtrace.baseline/v1";

/// A baseline document.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Baseline {
    pub schema: String,
    pub tool_version: String,
    /// When it was recorded (seconds since the epoch).
    pub recorded_unix_s: u64,
    /// `validate`, or `report NAME` for `--from`.
    pub source: String,
    pub profile: Profile,
    pub runs: Vec<Run>,
}

/// One traced workload: its name and its `gdrtrace.report/v1` report, as
/// written (a baseline stores reports verbatim), and the reports of its
/// further runs when it was recorded with `--repeat N` (N - 1 of them;
/// absent in a baseline of one run each, as before).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    pub workload: String,
    pub report: Value,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repeats: Vec<Value>,
}

/// A document given to `compare`: a baseline, or a plain report read as a
/// one-run baseline.
#[derive(Clone, Debug)]
pub struct Document {
    pub name: String,
    pub baseline: Baseline,
    pub plain_report: bool,
    /// Each run's report read typed ([`read_report`]), in the order of
    /// `baseline.runs`.
    pub reports: Vec<Report>,
    /// Each run's further reports (`Run::repeats`) read typed.
    pub repeats: Vec<Vec<Report>>,
}

impl Document {
    /// Every report of run `i`: the first, then its repeats.
    pub fn runs_of(&self, i: usize) -> Vec<&Report> {
        std::iter::once(&self.reports[i])
            .chain(self.repeats.get(i).into_iter().flatten())
            .collect()
    }
}

pub use super::workload::{Point, Summary, Workload, workloads};

/// The name of the workload a report traced: its workload summary's name
/// (validate), else `drive W` -> `W`, else the command's file name.
pub fn workload_name(report: &Report) -> String {
    let names: Vec<String> = workloads(report).into_iter().filter_map(|w| w.workload).collect();
    if !names.is_empty() {
        return names.join("+");
    }
    let cmd: Vec<&str> = report.command.iter().map(String::as_str).collect();
    match cmd.as_slice() {
        [_, "drive", w, ..] => w.to_string(),
        [_, "attach", ..] => "attach".into(),
        [first, ..] => Path::new(first)
            .file_name()
            .map_or("report".into(), |f| f.to_string_lossy().into_owned()),
        [] => "report".into(),
    }
}

/// A baseline from reports made on this machine (or copied from one):
/// `runs` as written, `reports` their typed form (same order).
pub fn record(runs: Vec<Run>, reports: &[Report], source: String) -> (Baseline, Option<String>) {
    let (profile, note) = profile::of_reports(reports);
    let recorded_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    (
        Baseline {
            schema: SCHEMA.into(),
            tool_version: crate::version::VERSION.into(),
            recorded_unix_s,
            source,
            profile,
            runs,
        },
        note,
    )
}

/// `gdrtrace.baseline/v7` -> 7.
fn schema_version(schema: &str) -> Option<u32> {
    schema.rsplit_once("/v")?.1.parse().ok()
}

/// Sections of the report an older (or hand-made) report may lack, each
/// read as absent (its empty JSON): the migration from any earlier report
/// to this build's. Every other section `compare` reads must be there.
const ABSENT_AS: &[(&str, &str)] = &[
    ("tool_version", "\"\""),
    ("command", "[]"),
    ("duration_s", "0.0"),
    ("signals", "[]"),
    ("kernel_histograms", "[]"),
    ("pin_counters", "{}"),
    ("loss", "{}"),
];

/// The report with the sections it lacks added as absent ([`ABSENT_AS`]).
fn migrated(r: &Value) -> std::borrow::Cow<'_, Value> {
    let Some(m) = r.as_object() else {
        return std::borrow::Cow::Borrowed(r);
    };
    if ABSENT_AS.iter().all(|(k, _)| m.contains_key(*k)) {
        return std::borrow::Cow::Borrowed(r);
    }
    let mut m = m.clone();
    for (k, absent) in ABSENT_AS {
        m.entry(*k)
            .or_insert_with(|| serde_json::from_str(absent).unwrap_or(Value::Null));
    }
    std::borrow::Cow::Owned(Value::Object(m))
}

/// A number that must not be negative (or NaN).
fn amount(x: f64, at: impl FnOnce() -> String) -> Result<(), String> {
    if x >= 0.0 {
        Ok(())
    } else {
        Err(format!("`{}` is {x}, not a non-negative number", at()))
    }
}

/// Reads a JSON value as a `gdrtrace.report/v1` report (its typed form,
/// after [`migrated`]) and checks what `compare` relies on beyond the
/// types: amounts are not negative, errors are no more than calls,
/// percentiles are ordered, serialized histograms decode and workload
/// summaries read. The error names the field (`operations[0].calls`), so
/// an edited or corrupted report is refused rather than compared as if it
/// held zeros.
pub fn read_report(v: &Value) -> Result<Report, String> {
    if *schema_of(v) != *crate::report::SCHEMA {
        return Err(format!("schema {} is not {}", schema_of(v), crate::report::SCHEMA));
    }
    let r = crate::report::read_typed(&migrated(v))?;
    if r.host.kernel.is_empty() {
        return Err("missing `host.kernel`".into());
    }
    amount(r.duration_s, || "duration_s".into())?;
    for (i, o) in r.operations.iter().enumerate() {
        let at = |f: &str| format!("operations[{i}].{f}");
        if o.errors > o.calls {
            return Err(format!(
                "`{}` is {}, more than its {} calls",
                at("errors"),
                o.errors,
                o.calls
            ));
        }
        let l = &o.latency;
        if !(l.p50 <= l.p90 && l.p90 <= l.p99 && l.p99 <= l.max) {
            return Err(format!(
                "`{}` is not ordered (p50 {} p90 {} p99 {} max {})",
                at("latency"),
                l.p50,
                l.p90,
                l.p99,
                l.max
            ));
        }
        if let Some(h) = &o.histogram {
            decode_hist(h).map_err(|e| format!("operation {}: histogram does not decode: {e}", o.name))?;
        }
    }
    for (i, p) in r.processes.iter().enumerate() {
        if let Some(c) = p.cpu_seconds {
            amount(c, || format!("processes[{i}].cpu_seconds"))?;
        }
    }
    for (i, w) in r.workloads.iter().enumerate() {
        let w: Workload =
            serde_path_to_error::deserialize(w).map_err(|e| format!("`workloads[{i}].{}`: {}", e.path(), e.inner()))?;
        for (key, points) in w.summary.series() {
            for (j, x) in points.iter().enumerate() {
                let at = |f: &str| format!("workloads[{i}].summary.{key}[{j}].{f}");
                for (f, v) in [
                    ("gbps", x.gbps),
                    ("busbw", x.busbw),
                    ("cpu_s_per_gb", x.cpu_s_per_gb),
                    ("cpu_s", x.cpu_s),
                    ("iters", x.iters),
                ] {
                    if let Some(v) = v {
                        amount(v, || at(f))?;
                    }
                }
            }
        }
    }
    Ok(r)
}

/// Reads a baseline, or a report as a one-run baseline, through the one
/// input reader (size limit, gzip, regular files only). Every failure is
/// one line naming the file (`Error::Input`: exit 2).
pub fn load(path: &Path) -> crate::error::Result<Document> {
    let mut input = crate::input::Input::open(path)?;
    let v = crate::input::json_of(&mut input)?;
    document(input.name(), v).map_err(crate::error::Error::Input)
}

/// A parsed baseline or report, read typed (see [`read_report`]).
pub fn document(name: &str, v: Value) -> Result<Document, String> {
    let name = name.to_string();
    let schema = schema_of(&v).as_str().unwrap_or("").to_string();
    let newer = |kind: &str, ours: &str| {
        let theirs = schema_version(&schema).unwrap_or(0);
        let mine = schema_version(ours).unwrap_or(1);
        if theirs > mine {
            format!(
                "{name} has schema {schema}, newer than this gdrtrace {} reads ({ours}): use a newer gdrtrace",
                env!("CARGO_PKG_VERSION")
            )
        } else {
            format!("{name} has unsupported {kind} schema {schema} (this gdrtrace reads {ours})")
        }
    };
    if schema == SCHEMA {
        let baseline: Baseline =
            serde_json::from_value(v).map_err(|e| format!("{name} is a malformed baseline: {e}"))?;
        if baseline.runs.is_empty() {
            return Err(format!("{name} is a malformed baseline: it holds no runs"));
        }
        // Runs are paired by name: a second run of one name would never be
        // compared (the first would answer for both).
        for (i, run) in baseline.runs.iter().enumerate() {
            if let Some(j) = baseline.runs[..i].iter().position(|r| r.workload == run.workload) {
                return Err(format!(
                    "{name} is a malformed baseline: runs {} and {} are both named '{}' (each workload is compared by its name: rename one)",
                    j + 1,
                    i + 1,
                    run.workload
                ));
            }
        }
        let reports = baseline
            .runs
            .iter()
            .enumerate()
            .map(|(i, run)| {
                read_report(&run.report)
                    .map_err(|e| format!("{name} is a malformed baseline: run {} ({}): {e}", i + 1, run.workload))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let repeats = baseline
            .runs
            .iter()
            .enumerate()
            .map(|(i, run)| {
                run.repeats
                    .iter()
                    .enumerate()
                    .map(|(k, r)| {
                        read_report(r).map_err(|e| {
                            format!(
                                "{name} is a malformed baseline: run {} ({}), repeat {}: {e}",
                                i + 1,
                                run.workload,
                                k + 2
                            )
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Document {
            name,
            baseline,
            plain_report: false,
            reports,
            repeats,
        })
    } else if schema == crate::report::SCHEMA {
        let report = read_report(&v).map_err(|e| format!("{name} is a malformed report: {e}"))?;
        let run = Run {
            workload: workload_name(&report),
            report: v,
            repeats: Vec::new(),
        };
        let (baseline, _) = record(vec![run], std::slice::from_ref(&report), format!("report {name}"));
        Ok(Document {
            name,
            baseline,
            plain_report: true,
            reports: vec![report],
            repeats: vec![Vec::new()],
        })
    } else if schema.starts_with("gdrtrace.baseline/") {
        Err(newer("baseline", SCHEMA))
    } else if schema.starts_with("gdrtrace.report/") {
        Err(newer("report", crate::report::SCHEMA))
    } else if schema.is_empty() {
        Err(format!(
            "{name} is not a gdrtrace baseline or report (no `schema` field)"
        ))
    } else {
        Err(format!("{name} is not a gdrtrace baseline or report (schema {schema})"))
    }
}

pub fn decode_hist(b64: &str) -> Result<Histogram<u64>, String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|e| format!("base64: {e}"))?;
    hdrhistogram::serialization::Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| format!("{e:?}"))
}
