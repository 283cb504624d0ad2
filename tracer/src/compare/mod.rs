//! Baselines (`gdrtrace.baseline/v1`: reports plus the profile they were
//! made on) and their comparison: per workload and metric, the change and
//! whether it crosses its threshold. Documented in docs/compare.md.
pub mod html;
pub mod profile;
pub mod render;
pub mod thresholds;

use std::{collections::BTreeMap, path::Path};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use profile::Profile;
pub use thresholds::{Limits, Thresholds};

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

/// Latency of one (operation, transport).
#[derive(Clone, Debug)]
pub struct Lat {
    pub count: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
    /// Percentiles recomputed from the serialized histogram (not copied).
    pub exact: bool,
    /// Power-of-two buckets `(min, max, count)`.
    pub buckets: Vec<(u64, u64, u64)>,
}

/// One point of a bandwidth series (from a workload summary).
#[derive(Clone, Debug)]
pub struct BwPoint {
    pub size: u64,
    pub gbps: f64,
    pub cpu_s_per_gb: Option<f64>,
}

/// What `compare` reads from one report.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// Transport verdict -> processes with it.
    pub verdicts: BTreeMap<String, u64>,
    /// Operation -> transport -> calls.
    pub op_transports: BTreeMap<String, BTreeMap<String, u64>>,
    /// `op [transport]` -> latency.
    pub latency: BTreeMap<String, Lat>,
    /// Bytes of copies and collectives, and of those the host-staged part.
    pub moved_bytes: u64,
    pub staged_bytes: u64,
    pub cpu_seconds: f64,
    pub registrations: u64,
    pub duration_s: f64,
    /// Series (copy case, collective) -> points by size.
    pub bandwidth: BTreeMap<String, Vec<BwPoint>>,
}

/// Transports whose bytes go through host memory.
pub fn staged_transport(t: &str) -> bool {
    matches!(t, "host-staged" | "shm" | "socket")
}

fn latency_of(o: &Value) -> Lat {
    if let Some(h) = o["histogram"].as_str().and_then(|h| decode_hist(h).ok()) {
        return Lat {
            count: h.len(),
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            max: h.max(),
            exact: true,
            buckets: crate::report::log2_buckets(
                h.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value())),
            )
            .into_iter()
            .map(|b| (b.min, b.max, b.count))
            .collect(),
        };
    }
    let l = &o["latency"];
    let u = |k: &str| l[k].as_u64().unwrap_or(0);
    Lat {
        count: u("count"),
        p50: u("p50"),
        p90: u("p90"),
        p99: u("p99"),
        max: u("max"),
        exact: false,
        buckets: l["buckets"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|b| {
                        let f = |k: &str| b[k].as_u64().unwrap_or(0);
                        (f("min"), f("max"), f("count"))
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

impl Metrics {
    pub fn of(r: &Value) -> Metrics {
        let mut m = Metrics {
            duration_s: r["duration_s"].as_f64().unwrap_or(0.0),
            ..Metrics::default()
        };
        for v in r["verdicts"].as_array().into_iter().flatten() {
            if let Some(t) = v["transport"].as_str() {
                *m.verdicts.entry(t.to_string()).or_default() += 1;
            }
        }
        for o in r["operations"].as_array().into_iter().flatten() {
            let name = o["name"].as_str().unwrap_or("?").to_string();
            // Old baselines name GPU<->pinned copies `host-only`: read as today's name.
            let transport =
                crate::classify::Transport::current_name(&name, o["transport"].as_str().unwrap_or("unknown"))
                    .to_string();
            let calls = o["calls"].as_u64().unwrap_or(0);
            *m.op_transports
                .entry(name.clone())
                .or_default()
                .entry(transport.clone())
                .or_default() += calls;
            if name.starts_with("cuMemcpy") {
                let bytes = o["bytes"].as_u64().unwrap_or(0);
                m.moved_bytes += bytes;
                if staged_transport(&transport) {
                    m.staged_bytes += bytes;
                }
            }
            m.latency.insert(format!("{name} [{transport}]"), latency_of(o));
        }
        for c in r["collectives"].as_array().into_iter().flatten() {
            let bytes = c["bytes"].as_u64().unwrap_or(0);
            m.moved_bytes += bytes;
            if staged_transport(c["transport"].as_str().unwrap_or("")) {
                m.staged_bytes += bytes;
            }
        }
        for p in r["processes"].as_array().into_iter().flatten() {
            m.cpu_seconds += p["cpu_seconds"].as_f64().unwrap_or(0.0);
            m.registrations += p["registrations"].as_u64().unwrap_or(0);
        }
        for w in r["workloads"].as_array().into_iter().flatten() {
            let s = &w["summary"];
            // cuda-copy: results[] {case, size, gbps, cpu_s_per_gb};
            // nccl: sizes[] {size, busbw, iters, cpu_s}.
            for key in ["results", "sizes"] {
                for x in s[key].as_array().into_iter().flatten() {
                    let Some(size) = x["size"].as_u64() else { continue };
                    let Some(gbps) = x["gbps"].as_f64().or_else(|| x["busbw"].as_f64()) else {
                        continue;
                    };
                    let series = x["case"]
                        .as_str()
                        .map(str::to_string)
                        .or_else(|| s["op"].as_str().map(|op| format!("{op} busbw")))
                        .unwrap_or_else(|| key.to_string());
                    let cpu = x["cpu_s_per_gb"].as_f64().or_else(|| {
                        let bytes = size as f64 * x["iters"].as_f64()?;
                        (bytes > 0.0).then(|| x["cpu_s"].as_f64().unwrap_or(0.0) / (bytes / 1e9))
                    });
                    m.bandwidth.entry(series).or_default().push(BwPoint {
                        size,
                        gbps,
                        cpu_s_per_gb: cpu,
                    });
                }
            }
        }
        for pts in m.bandwidth.values_mut() {
            pts.sort_by_key(|p| p.size);
        }
        m
    }

    /// Host-staged share of moved bytes, in percent.
    pub fn staged_pct(&self) -> Option<f64> {
        (self.moved_bytes > 0).then(|| self.staged_bytes as f64 * 100.0 / self.moved_bytes as f64)
    }

    /// CPU seconds of the traced processes per GB moved (with at least 1 MiB moved).
    pub fn cpu_per_gb(&self) -> Option<f64> {
        (self.moved_bytes >= 1 << 20 && self.cpu_seconds > 0.0)
            .then(|| self.cpu_seconds / (self.moved_bytes as f64 / 1e9))
    }

    /// `p2p/nvlink x2, shm x1`.
    pub fn verdict_mix(&self) -> String {
        if self.verdicts.is_empty() {
            return "none".into();
        }
        self.verdicts
            .iter()
            .map(|(t, n)| format!("{t} x{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// How a row came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Within its threshold.
    Ok,
    /// Crossed its threshold in the bad direction.
    Regression,
    /// Crossed its threshold in the good direction.
    Better,
    /// Shown, not judged.
    Info,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Regression => "REGRESSION",
            Status::Better => "better",
            Status::Info => "info",
        }
    }
}

/// One compared metric.
#[derive(Clone, Debug)]
pub struct Row {
    pub metric: String,
    pub baseline: String,
    pub current: String,
    pub change: String,
    pub limit: String,
    pub status: Status,
}

/// One workload, compared.
#[derive(Clone, Debug)]
pub struct WorkloadCmp {
    pub name: String,
    /// Set when the current run has another name (two single runs paired).
    pub current_name: Option<String>,
    pub rows: Vec<Row>,
    pub base: Metrics,
    pub cur: Metrics,
}

/// A transport change: always a failure.
#[derive(Clone, Debug)]
pub struct TransportChange {
    pub workload: String,
    /// `verdicts` or an operation name.
    pub what: String,
    pub baseline: String,
    pub current: String,
}

/// A probe point that was attached in the baseline and is not now.
#[derive(Clone, Debug)]
pub struct LostProbe {
    pub point: String,
    pub baseline: String,
    pub current: String,
}

/// The whole comparison.
#[derive(Clone, Debug)]
pub struct Comparison {
    pub baseline: String,
    pub current: String,
    pub baseline_profile: Profile,
    pub current_profile: Profile,
    /// Identity differences (kernel, GPU, versions...) and probe-matrix ones.
    pub profile_diffs: Vec<profile::Difference>,
    pub lost_probes: Vec<LostProbe>,
    pub probe_lost_fails: bool,
    pub transport_changes: Vec<TransportChange>,
    pub workloads: Vec<WorkloadCmp>,
    pub notes: Vec<String>,
    /// Workloads of the baseline the current document lacks (a failure when
    /// the current document is a baseline too).
    pub missing: Vec<String>,
    pub missing_fails: bool,
}

impl Comparison {
    /// Rows over their thresholds, transport changes, lost probes (when
    /// they fail) and missing workloads (when they fail).
    pub fn regressions(&self) -> usize {
        self.workloads
            .iter()
            .flat_map(|w| &w.rows)
            .filter(|r| r.status == Status::Regression)
            .count()
            + if self.probe_lost_fails {
                self.lost_probes.len()
            } else {
                0
            }
            + if self.missing_fails { self.missing.len() } else { 0 }
    }

    /// 0: no regression, 1: regression.
    pub fn exit_code(&self) -> i32 {
        i32::from(self.regressions() > 0)
    }

    /// One line: what happened.
    pub fn headline(&self) -> String {
        let n = self.regressions();
        if n == 0 {
            return format!("compare: no regression ({} workloads compared)", self.workloads.len());
        }
        let mut parts = Vec::new();
        if !self.transport_changes.is_empty() {
            parts.push(format!(
                "transport changed: {}",
                self.transport_changes
                    .iter()
                    .map(|t| format!("{} {} {} -> {}", t.workload, t.what, t.baseline, t.current))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        if self.missing_fails && !self.missing.is_empty() {
            parts.push(format!("workloads missing: {}", self.missing.join(", ")));
        }
        if self.probe_lost_fails && !self.lost_probes.is_empty() {
            parts.push(format!("{} probe points became unavailable", self.lost_probes.len()));
        }
        let metrics: Vec<String> = self
            .workloads
            .iter()
            .flat_map(|w| w.rows.iter().map(move |r| (w, r)))
            .filter(|(_, r)| r.status == Status::Regression && r.limit != "any change")
            .map(|(w, r)| format!("{} {} {}", w.name, r.metric, r.change))
            .collect();
        if !metrics.is_empty() {
            let more = metrics.len().saturating_sub(3);
            parts.push(format!(
                "{}{}",
                metrics[..metrics.len().min(3)].join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ));
        }
        format!(
            "compare: REGRESSION: {n} over threshold{}",
            if parts.is_empty() {
                String::new()
            } else {
                format!(" ({})", parts.join("; "))
            }
        )
    }
}

fn pct_change(a: f64, b: f64) -> Option<f64> {
    (a != 0.0).then(|| (b - a) * 100.0 / a.abs())
}

fn fmt_pct(c: Option<f64>) -> String {
    c.map_or("-".into(), |c| format!("{c:+.1}%"))
}

/// Nanoseconds as the report's text does: 8.3us, 1.2ms.
pub fn fmt_ns(ns: u64) -> String {
    let f = ns as f64;
    if ns < 1000 {
        format!("{ns}ns")
    } else if f < 1e6 {
        format!("{:.1}us", f / 1e3)
    } else if f < 1e9 {
        format!("{:.1}ms", f / 1e6)
    } else {
        format!("{:.2}s", f / 1e9)
    }
}

/// `4K`, `64M`.
pub fn fmt_size(b: u64) -> String {
    for (unit, s) in [(1u64 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")] {
        if b >= unit && b.is_multiple_of(unit) {
            return format!("{}{s}", b / unit);
        }
    }
    format!("{b}")
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

fn compare_runs(
    name: &str,
    base: &Value,
    cur: &Value,
    l: &Limits,
) -> (Vec<Row>, Vec<TransportChange>, Metrics, Metrics) {
    let (a, b) = (Metrics::of(base), Metrics::of(cur));
    let mut rows = Vec::new();
    let mut changes = Vec::new();
    // Transport verdicts: any change in the mix is a failure.
    if !(a.verdicts.is_empty() && b.verdicts.is_empty()) {
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
    // Per-operation transports, for operations both runs made.
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
    // Operations the baseline made and the current run did not (a probe
    // point that went, a code path no longer taken): regressions. New ones
    // are shown.
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
    // Host-staged share of moved bytes, in points.
    match (a.staged_pct(), b.staged_pct()) {
        (Some(x), Some(y)) => {
            let d = y - x;
            rows.push(Row {
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
            });
        }
        (None, None) => {}
        (Some(x), None) => rows.push(missing("host-staged share of bytes".into(), format!("{x:.2}%"))),
        (x, y) => rows.push(Row {
            metric: "host-staged share of bytes".into(),
            baseline: x.map_or("no bytes moved".into(), |x| format!("{x:.2}%")),
            current: y.map_or("no bytes moved".into(), |y| format!("{y:.2}%")),
            change: "-".into(),
            limit: "-".into(),
            status: Status::Info,
        }),
    }
    if a.registrations > 0 || b.registrations > 0 {
        rows.push(up_is_bad(
            "registrations".into(),
            a.registrations as f64,
            b.registrations as f64,
            l.registrations_increase_pct,
            |v| format!("{v:.0}"),
        ));
        let rate = |m: &Metrics| (m.duration_s > 0.0).then(|| m.registrations as f64 / m.duration_s);
        if let (Some(x), Some(y)) = (rate(&a), rate(&b)) {
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
    match (a.cpu_per_gb(), b.cpu_per_gb()) {
        (Some(x), Some(y)) => rows.push(up_is_bad(
            "CPU per GB moved (traced processes)".into(),
            x,
            y,
            l.cpu_per_gb_increase_pct,
            |v| format!("{v:.3} s/GB"),
        )),
        (Some(x), None) => rows.push(missing(
            "CPU per GB moved (traced processes)".into(),
            format!("{x:.3} s/GB"),
        )),
        _ => {}
    }
    // Bandwidth per series and size; CPU per GB at each series' largest size.
    for (series, pa) in &a.bandwidth {
        let Some(pb) = b.bandwidth.get(series) else {
            for p in pa {
                rows.push(missing(
                    format!("{series} {} bandwidth", fmt_size(p.size)),
                    format!("{:.2} GB/s", p.gbps),
                ));
            }
            continue;
        };
        for p in pa {
            let Some(q) = pb.iter().find(|q| q.size == p.size) else {
                rows.push(missing(
                    format!("{series} {} bandwidth", fmt_size(p.size)),
                    format!("{:.2} GB/s", p.gbps),
                ));
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
                metric: format!("{series} {} bandwidth", fmt_size(p.size)),
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
                format!("{series} {} CPU per GB", fmt_size(p.size)),
                x,
                y,
                l.cpu_per_gb_increase_pct,
                |v| format!("{v:.4} s/GB"),
            ));
        }
    }
    // Latency percentiles of each (operation, transport) with enough samples.
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
                baseline: fmt_ns(pa),
                current: fmt_ns(pb),
                change: fmt_pct(c),
                limit: if few {
                    format!("< {} samples", l.latency_p99_min_samples)
                } else {
                    format!("+{limit}% and +{}", fmt_ns(l.latency_min_increase_ns))
                },
                status,
            });
        }
    }
    (rows, changes, a, b)
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
    let mut pairs: Vec<(&Run, &Run)> = Vec::new();
    let mut missing = Vec::new();
    let (rb, rc) = (&base.baseline.runs, &cur.baseline.runs);
    if rb.len() == 1 && rc.len() == 1 {
        if rb[0].workload != rc[0].workload {
            notes.push(format!(
                "comparing workload '{}' of the baseline with '{}' of the current run",
                rb[0].workload, rc[0].workload
            ));
        }
        pairs.push((&rb[0], &rc[0]));
    } else {
        for r in rb {
            match rc.iter().find(|c| c.workload == r.workload) {
                Some(c) => pairs.push((r, c)),
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
    for (r, c) in pairs {
        let limits = t.for_workload(&r.workload);
        probe_lost_fails |= limits.probe_lost_fails;
        let (rows, changes, base_m, cur_m) = compare_runs(&r.workload, &r.report, &c.report, &limits);
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

#[cfg(test)]
mod tests {
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
        check_report(&r).expect("valid report");
        let name = workload_name(&r);
        let (baseline, _) = record(
            vec![Run {
                workload: name,
                report: r,
            }],
            "test".into(),
        );
        Document {
            name: "t".into(),
            baseline,
            plain_report: false,
        }
    }

    #[test]
    fn exact_percentiles_from_the_serialized_histogram() {
        let m = Metrics::of(&report("gpu-host-dma", 10_000));
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
        assert_eq!(workload_name(&report("x", 1)), "cuda-copy");
        let v = serde_json::json!({"command": ["/usr/bin/ib_write_bw", "-d"], "workloads": []});
        assert_eq!(workload_name(&v), "ib_write_bw");
        let v = serde_json::json!({"command": ["/opt/gdrtrace", "attach", "--pid", "7"]});
        assert_eq!(workload_name(&v), "attach");
        let v = serde_json::json!({"workloads": [{"workload": "pin-churn"}]});
        assert_eq!(workload_name(&v), "pin-churn");
    }
}
