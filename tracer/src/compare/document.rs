//! Reading: baselines (`gdrtrace.baseline/v1`: reports plus the profile
//! they were made on) and plain reports, checked field by field before
//! anything is compared.
use std::path::Path;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Profile, profile};

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

/// One traced workload: its name and its `gdrtrace.report/v1` report.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    pub workload: String,
    pub report: Value,
}

/// A document given to `compare`: a baseline, or a plain report read as a
/// one-run baseline.
#[derive(Clone, Debug)]
pub struct Document {
    pub name: String,
    pub baseline: Baseline,
    pub plain_report: bool,
}

/// The name of the workload a report traced: its workload summary's name
/// (validate), else `drive W` -> `W`, else the command's file name.
pub fn workload_name(report: &Value) -> String {
    let names: Vec<&str> = report["workloads"]
        .as_array()
        .map(|a| a.iter().filter_map(|w| w["workload"].as_str()).collect())
        .unwrap_or_default();
    if !names.is_empty() {
        return names.join("+");
    }
    let cmd: Vec<&str> = report["command"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    match cmd.as_slice() {
        [_, "drive", w, ..] => w.to_string(),
        [_, "attach", ..] => "attach".into(),
        [first, ..] => Path::new(first)
            .file_name()
            .map_or("report".into(), |f| f.to_string_lossy().into_owned()),
        [] => "report".into(),
    }
}

/// A baseline from reports made on this machine (or copied from one).
pub fn record(runs: Vec<Run>, source: String) -> (Baseline, Option<String>) {
    let reports: Vec<&Value> = runs.iter().map(|r| &r.report).collect();
    let (profile, note) = profile::of_reports(&reports);
    let recorded_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    (
        Baseline {
            schema: SCHEMA.into(),
            tool_version: env!("CARGO_PKG_VERSION").into(),
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

/// A field that must be a count (a non-negative integer) when present.
fn count_at(v: &Value, at: &str) -> Result<(), String> {
    if v.is_null() || v.is_u64() {
        Ok(())
    } else {
        Err(format!("`{at}` is {v}, not a count (a non-negative integer)"))
    }
}

/// A field that must be a non-negative number when present.
fn amount_at(v: &Value, at: &str) -> Result<(), String> {
    match v {
        Value::Null => Ok(()),
        Value::Number(n) if n.as_f64().is_some_and(|x| x >= 0.0) => Ok(()),
        _ => Err(format!("`{at}` is {v}, not a non-negative number")),
    }
}

/// A field that must be a string.
fn string_at<'a>(v: &'a Value, at: &str) -> Result<&'a str, String> {
    v.as_str().ok_or_else(|| format!("`{at}` is {v}, not a string"))
}

/// An array field (required).
fn array_at<'a>(r: &'a Value, field: &str) -> Result<&'a Vec<Value>, String> {
    r[field]
        .as_array()
        .ok_or_else(|| format!("missing or invalid `{field}` (expected an array)"))
}

/// Checks that a JSON value is a `gdrtrace.report/v1` report with the parts
/// `compare` reads, each of the type it must have: counts are non-negative
/// integers, percentiles are ordered, errors are no more than calls, and
/// serialized histograms decode. The error names the field
/// (`operations[0].calls`), so an edited or corrupted report is refused
/// rather than compared as if it held zeros.
pub fn check_report(r: &Value) -> Result<(), String> {
    if r["schema"] != crate::report::SCHEMA {
        return Err(format!("schema {} is not {}", r["schema"], crate::report::SCHEMA));
    }
    string_at(&r["host"]["kernel"], "host.kernel").map_err(|_| "missing `host.kernel`".to_string())?;
    amount_at(&r["duration_s"], "duration_s")?;
    for (i, o) in array_at(r, "operations")?.iter().enumerate() {
        let at = |f: &str| format!("operations[{i}].{f}");
        let name = string_at(&o["name"], &at("name")).map_err(|_| format!("operations[{i}] has no `name`"))?;
        if !o["transport"].is_null() {
            string_at(&o["transport"], &at("transport"))?;
        }
        for f in ["calls", "errors", "bytes"] {
            count_at(&o[f], &at(f))?;
        }
        // Signed: pages pinned count up, pages unpinned down.
        if !(o["pages"].is_null() || o["pages"].is_i64()) {
            return Err(format!("`{}` is {}, not an integer", at("pages"), o["pages"]));
        }
        if o["errors"].as_u64() > o["calls"].as_u64() {
            return Err(format!(
                "`{}` is {}, more than its {} calls",
                at("errors"),
                o["errors"],
                o["calls"]
            ));
        }
        if !o["latency"].is_object() {
            return Err(format!("operation {name} has no `latency`"));
        }
        let l = &o["latency"];
        for f in ["count", "min", "p50", "p90", "p99", "p999", "max"] {
            count_at(&l[f], &at(&format!("latency.{f}")))?;
        }
        let ordered = ["p50", "p90", "p99", "max"]
            .windows(2)
            .all(|w| l[w[0]].as_u64().unwrap_or(0) <= l[w[1]].as_u64().unwrap_or(u64::MAX));
        if !ordered {
            return Err(format!(
                "`{}` is not ordered (p50 {} p90 {} p99 {} max {})",
                at("latency"),
                l["p50"],
                l["p90"],
                l["p99"],
                l["max"]
            ));
        }
        if let Some(h) = o.get("histogram").filter(|h| !h.is_null()) {
            let h = h
                .as_str()
                .ok_or_else(|| format!("operation {name}: `histogram` is not a string"))?;
            decode_hist(h).map_err(|e| format!("operation {name}: histogram does not decode: {e}"))?;
        }
    }
    for (i, c) in array_at(r, "coverage")?.iter().enumerate() {
        string_at(&c["point"], &format!("coverage[{i}].point"))?;
        string_at(&c["status"], &format!("coverage[{i}].status"))?;
    }
    for (i, p) in array_at(r, "processes")?.iter().enumerate() {
        let at = |f: &str| format!("processes[{i}].{f}");
        count_at(&p["pid"], &at("pid"))?;
        count_at(&p["registrations"], &at("registrations"))?;
        amount_at(&p["cpu_seconds"], &at("cpu_seconds"))?;
        for (op, n) in p["calls"].as_object().into_iter().flatten() {
            count_at(n, &at(&format!("calls.{op}")))?;
        }
    }
    for (i, v) in array_at(r, "verdicts")?.iter().enumerate() {
        string_at(&v["transport"], &format!("verdicts[{i}].transport"))?;
    }
    if !r["collectives"].is_null() {
        for (i, c) in array_at(r, "collectives")?.iter().enumerate() {
            count_at(&c["calls"], &format!("collectives[{i}].calls"))?;
            count_at(&c["bytes"], &format!("collectives[{i}].bytes"))?;
        }
    }
    for (i, w) in r["workloads"].as_array().into_iter().flatten().enumerate() {
        for key in ["results", "sizes"] {
            for (j, x) in w["summary"][key].as_array().into_iter().flatten().enumerate() {
                let at = |f: &str| format!("workloads[{i}].summary.{key}[{j}].{f}");
                count_at(&x["size"], &at("size"))?;
                for f in ["gbps", "busbw", "cpu_s_per_gb", "cpu_s", "iters"] {
                    amount_at(&x[f], &at(f))?;
                }
            }
        }
    }
    // Every other section, typed: the report's own types (see
    // `report::read_typed`).
    // A section this build's report has and an older or hand-made one
    // lacks is compared as absent, as before; a wrong type is refused.
    match crate::report::read_typed(r) {
        Err(e) if !e.contains(": missing field `") => return Err(e),
        _ => {}
    }
    Ok(())
}

/// Reads a baseline, or a report as a one-run baseline, through the one
/// input reader (size limit, gzip, regular files only). Every failure is
/// one line naming the file (`Error::Input`: exit 2).
pub fn load(path: &Path) -> crate::error::Result<Document> {
    let mut input = crate::input::Input::open(path)?;
    let v = crate::input::json_of(&mut input)?;
    document(input.name(), v).map_err(crate::error::Error::Input)
}

/// A parsed baseline or report, checked (see [`check_report`]).
pub fn document(name: &str, v: Value) -> Result<Document, String> {
    let name = name.to_string();
    let schema = v["schema"].as_str().unwrap_or("").to_string();
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
        for (i, run) in baseline.runs.iter().enumerate() {
            check_report(&run.report)
                .map_err(|e| format!("{name} is a malformed baseline: run {} ({}): {e}", i + 1, run.workload))?;
        }
        Ok(Document {
            name,
            baseline,
            plain_report: false,
        })
    } else if schema == crate::report::SCHEMA {
        check_report(&v).map_err(|e| format!("{name} is a malformed report: {e}"))?;
        let run = Run {
            workload: workload_name(&v),
            report: v,
        };
        let (baseline, _) = record(vec![run], format!("report {name}"));
        Ok(Document {
            name,
            baseline,
            plain_report: true,
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
