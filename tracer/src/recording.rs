//! Recordings (`--record FILE`, schema `gdrtrace.recording/v1`, described in
//! docs/recording.md): the aggregator's whole input as JSON lines, so that
//! `gdrtrace replay` rebuilds the report through the same aggregator,
//! classification and report code.
//!
//! A recording is a header, then inputs in the order the aggregator received
//! them (`event`, `target`, `tick`, `alive-check`, `aggregates`), each input
//! followed by the process facts the live source answered while it was
//! handled (`process`, `env`, `sample`, `gone`), then a footer (loss,
//! coverage, pin counters, duration) and, optionally, a `workloads` line.
use std::{
    collections::BTreeMap,
    fs::File,
    io::{BufWriter, Write as _},
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracer_common::{AggKey, AggValue, Event, kind};

use crate::{
    error::{Error, Result},
    host::{Host, HostFacts, monotonic_ns},
    probes::{
        Coverage, Family, Status,
        ops::{kind_code, kind_name, op_code, op_name},
        planner::{Attempt, ProcessLibrary},
    },
    report::{Inputs, Loss, PinCounters},
    stats::{
        Aggregator,
        input::{Input, Observer},
        source::Fact,
    },
};

pub const SCHEMA: &str = "gdrtrace.recording/v1";
/// Schema family: a recording `gdrtrace.recording/vN` with N > 1 is newer
/// than this build.
const SCHEMA_PREFIX: &str = "gdrtrace.recording/v";

/// The first line.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Header {
    pub schema: String,
    pub tool_version: String,
    pub host: Host,
    pub facts: HostFacts,
    /// The clock of every `*_ns` field (`CLOCK_MONOTONIC`), and its value at the start.
    pub clock: String,
    pub started_ns: u64,
}

impl Header {
    /// The header of a recording starting now, on this machine.
    pub fn now() -> Self {
        Header {
            schema: SCHEMA.into(),
            tool_version: env!("CARGO_PKG_VERSION").into(),
            host: crate::host::host(),
            facts: HostFacts::read(),
            clock: "CLOCK_MONOTONIC".into(),
            started_ns: monotonic_ns(),
        }
    }
}

/// The footer of a trace, from the report inputs the trace gathered.
pub fn footer(inputs: &Inputs, agg: &Aggregator, events: u64) -> Footer {
    Footer {
        command: inputs.command.clone(),
        duration_s: inputs.duration_s,
        events,
        loss: inputs.loss.clone(),
        pin_counters: inputs.pins.clone(),
        coverage: inputs
            .coverage
            .iter()
            .filter_map(|c| serde_json::to_value(c).ok())
            .collect(),
        kernel_slots: inputs
            .kernel_slots
            .iter()
            .map(|(code, slots)| Slots {
                op: op_name(*code),
                op_code: *code,
                slots: slots.clone(),
            })
            .collect(),
        process_libraries: inputs
            .process_libraries
            .iter()
            .map(|(pid, libs)| (*pid, libs.iter().filter_map(|l| serde_json::to_value(l).ok()).collect()))
            .collect(),
        vm_pin_kib_at_attach: agg
            .procs
            .iter()
            .filter_map(|(pid, p)| Some((*pid, p.vm_pin_kib_at_attach?)))
            .collect(),
        gpu_links: inputs.gpu_links.clone(),
        probe_hits: inputs
            .probe_hits
            .iter()
            .map(|(op, hits)| crate::report::ProbeHits {
                op: op_name(*op),
                hits: *hits,
            })
            .collect(),
    }
}

/// The report inputs a recording's header and footer hold.
pub fn inputs_of(header: &Header, footer: &Footer) -> std::result::Result<Inputs, String> {
    Ok(Inputs {
        command: footer.command.clone(),
        gpu_links: footer.gpu_links.clone(),
        host: header.host.clone(),
        facts: header.facts.clone(),
        duration_s: footer.duration_s,
        coverage: footer
            .coverage
            .iter()
            .map(coverage_of)
            .collect::<std::result::Result<_, _>>()?,
        loss: footer.loss.clone(),
        kernel_slots: footer
            .kernel_slots
            .iter()
            .map(|s| (op_code(&s.op).unwrap_or(s.op_code), s.slots.clone()))
            .collect(),
        pins: footer.pin_counters.clone(),
        process_libraries: footer
            .process_libraries
            .iter()
            .map(|(pid, libs)| {
                Ok((
                    *pid,
                    libs.iter()
                        .map(library_of)
                        .collect::<std::result::Result<Vec<_>, String>>()?,
                ))
            })
            .collect::<std::result::Result<_, String>>()?,
        probe_hits: footer
            .probe_hits
            .iter()
            .filter_map(|h| Some((op_code(&h.op)?, h.hits)))
            .collect(),
    })
}

/// A number as written in a recording: JSON integer, or a `0x` hex string
/// (addresses and handles are written as hex, exact for any tool).
fn num(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| n.as_i64().map(|i| i as u64)),
        Value::String(s) => match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => s.strip_prefix('-').map_or_else(
                || s.parse().ok(),
                |d| d.parse::<i64>().ok().map(|i| i.wrapping_neg() as u64),
            ),
        },
        _ => None,
    }
}

fn hex(v: u64) -> Value {
    Value::String(format!("{v:#x}"))
}

/// A signed value: a JSON integer when a double represents it exactly, hex otherwise.
fn signed(v: i64) -> Value {
    if v.unsigned_abs() < (1 << 53) {
        Value::from(v)
    } else {
        hex(v as u64)
    }
}

/// One event as a JSON object, every field named.
pub fn event_json(e: &Event) -> Value {
    let end = e.comm.iter().position(|&b| b == 0).unwrap_or(e.comm.len());
    let mut m = serde_json::Map::new();
    m.insert("type".into(), "event".into());
    m.insert("kind".into(), kind_name(e.kind).into());
    if e.kind == kind::CALL || e.kind == kind::ENTRY {
        m.insert("op".into(), op_name(e.op).into());
        m.insert("op_code".into(), e.op.into());
    }
    m.insert("pid".into(), e.pid.into());
    m.insert("tid".into(), e.tid.into());
    m.insert("start_ns".into(), e.start_ns.into());
    m.insert("dur_ns".into(), e.dur_ns.into());
    m.insert("args".into(), Value::Array(e.args.iter().map(|a| hex(*a)).collect()));
    m.insert("ret".into(), signed(e.ret));
    m.insert("comm".into(), String::from_utf8_lossy(&e.comm[..end]).into());
    Value::Object(m)
}

/// Parses an event line. Ops are resolved by name first (op codes of
/// library rows are table indices and may move between versions).
pub fn event_of(v: &Value) -> std::result::Result<Event, String> {
    let mut e = Event {
        kind: kind_code(v["kind"].as_str().ok_or("event without kind")?)
            .ok_or_else(|| format!("unknown event kind {}", v["kind"]))?,
        ..Default::default()
    };
    if let Some(name) = v["op"].as_str() {
        e.op = op_code(name)
            .or_else(|| v["op_code"].as_u64().map(|c| c as u32))
            .ok_or_else(|| format!("unknown op {name} (recorded by a newer gdrtrace?)"))?;
    }
    let u = |k: &str| num(&v[k]).ok_or_else(|| format!("event field {k} missing or not a number"));
    e.pid = u("pid")? as u32;
    e.tid = num(&v["tid"]).map_or(e.pid, |t| t as u32);
    e.start_ns = u("start_ns")?;
    e.dur_ns = num(&v["dur_ns"]).unwrap_or(0);
    if let Some(a) = v["args"].as_array() {
        if a.len() > e.args.len() {
            return Err(format!("event has {} args (at most {})", a.len(), e.args.len()));
        }
        for (i, x) in a.iter().enumerate() {
            e.args[i] = num(x).ok_or_else(|| format!("event arg {i} is not a number: {x}"))?;
        }
    }
    e.ret = num(&v["ret"]).unwrap_or(0) as i64;
    let comm = v["comm"].as_str().unwrap_or("").as_bytes();
    let n = comm.len().min(e.comm.len() - 1);
    e.comm[..n].copy_from_slice(&comm[..n]);
    Ok(e)
}

/// One row of the kernel-aggregated collectives.
pub fn agg_json(rows: &[(AggKey, AggValue)]) -> Value {
    Value::Array(
        rows.iter()
            .map(|(k, v)| {
                serde_json::json!({
                    "pid": k.tgid, "op": op_name(k.op), "op_code": k.op, "handle": hex(k.handle),
                    "calls": v.calls, "bytes": v.bytes,
                })
            })
            .collect(),
    )
}

pub fn agg_of(v: &Value) -> std::result::Result<Vec<(AggKey, AggValue)>, String> {
    let rows = v["rows"].as_array().ok_or("aggregates without rows")?;
    rows.iter()
        .map(|r| {
            let op = r["op"]
                .as_str()
                .and_then(op_code)
                .or_else(|| r["op_code"].as_u64().map(|c| c as u32))
                .ok_or_else(|| format!("aggregate row with unknown op {}", r["op"]))?;
            let f = |k: &str| num(&r[k]).ok_or_else(|| format!("aggregate row field {k} missing"));
            Ok((
                AggKey {
                    tgid: f("pid")? as u32,
                    op,
                    handle: num(&r["handle"]).unwrap_or(0),
                },
                AggValue {
                    calls: f("calls")?,
                    bytes: f("bytes")?,
                },
            ))
        })
        .collect()
}

/// In-kernel log2 slots of one op.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Slots {
    pub op: String,
    pub op_code: u32,
    pub slots: Vec<u64>,
}

/// The last line of the trace (before an optional `workloads` line).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Footer {
    pub command: Vec<String>,
    pub duration_s: f64,
    /// Events written (a truncated file has fewer lines than this).
    pub events: u64,
    pub loss: Loss,
    pub pin_counters: PinCounters,
    pub coverage: Vec<Value>,
    pub kernel_slots: Vec<Slots>,
    #[serde(default)]
    pub process_libraries: BTreeMap<u32, Vec<Value>>,
    /// `VmPin` at attach, per process (`attach`).
    #[serde(default)]
    pub vm_pin_kib_at_attach: BTreeMap<u32, u64>,
    /// GPU interconnect traffic over the window (steady-state evidence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_links: Option<crate::counters::GpuLinks>,
    /// Probe entries per op.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probe_hits: Vec<crate::report::ProbeHits>,
}

fn strategy(name: &str) -> &'static str {
    crate::probes::catalog::Strategy::ALL
        .into_iter()
        .map(|s| s.name())
        .find(|s| *s == name)
        .unwrap_or("unknown")
}

/// A coverage row from its JSON form.
pub fn coverage_of(v: &Value) -> std::result::Result<Coverage, String> {
    let family: Family = serde_json::from_value(v["family"].clone()).map_err(|e| format!("coverage family: {e}"))?;
    let status: Status = serde_json::from_value(v["status"].clone()).map_err(|e| format!("coverage status: {e}"))?;
    let strs = |k: &str| -> Vec<String> {
        v[k].as_array()
            .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
            .unwrap_or_default()
    };
    Ok(Coverage {
        point: v["point"].as_str().ok_or("coverage row without point")?.to_string(),
        family,
        status,
        via: v["via"].as_str().map(strategy),
        reason: v["reason"].as_str().map(String::from),
        tried: v["tried"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|t| Attempt {
                        strategy: strategy(t["strategy"].as_str().unwrap_or("")),
                        error: t["error"].as_str().unwrap_or("").to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        detail: strs("detail"),
    })
}

pub fn library_of(v: &Value) -> std::result::Result<ProcessLibrary, String> {
    Ok(ProcessLibrary {
        lib: serde_json::from_value(v["lib"].clone()).map_err(|e| format!("library: {e}"))?,
        path: v["path"].as_str().map(String::from),
        status: serde_json::from_value(v["status"].clone()).map_err(|e| format!("library status: {e}"))?,
        detail: v["detail"].as_str().unwrap_or("").to_string(),
        modules: serde_json::from_value(v["modules"].clone()).unwrap_or_default(),
    })
}

/// Writes a recording while tracing. Write errors are kept and reported
/// once, when the recording is finished.
#[derive(Debug)]
pub struct Recorder {
    path: PathBuf,
    out: BufWriter<File>,
    error: Option<std::io::Error>,
    /// A trigger (tick, alive check) written only if facts follow it.
    lazy: Option<Value>,
    last_aggregates: Vec<(AggKey, u64, u64)>,
    last_sample: BTreeMap<u32, (Option<u64>, Option<f64>)>,
    pub events: u64,
}

impl Recorder {
    pub fn create(path: &Path, header: &Header) -> Result<Self> {
        let f = File::create(path).map_err(|e| Error::io(format!("creating the recording {}", path.display()), e))?;
        let mut r = Recorder {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(1 << 16, f),
            error: None,
            lazy: None,
            last_aggregates: Vec::new(),
            last_sample: BTreeMap::new(),
            events: 0,
        };
        let mut h = serde_json::to_value(header).map_err(|e| Error::Workload(format!("recording header: {e}")))?;
        if let Some(m) = h.as_object_mut() {
            m.insert("type".into(), "header".into());
        }
        r.line(&h);
        Ok(r)
    }

    fn line(&mut self, v: &Value) {
        if self.error.is_some() {
            return;
        }
        let r = serde_json::to_writer(&mut self.out, v)
            .map_err(std::io::Error::from)
            .and_then(|()| self.out.write_all(b"\n"));
        if let Err(e) = r {
            self.error = Some(e);
        }
    }

    fn event(&mut self, e: &Event) {
        self.lazy = None;
        self.events += 1;
        self.line(&event_json(e));
    }

    /// An input that always gets a line (a target added).
    fn input(&mut self, v: Value) {
        self.lazy = None;
        self.line(&v);
    }

    /// An input written only if a fact follows (ticks, alive checks).
    fn lazy_input(&mut self, v: Value) {
        self.lazy = Some(v);
    }

    fn fact(&mut self, f: &Fact) {
        if let Fact::Sample {
            pid,
            vm_pin_kib,
            cpu_seconds,
        } = f
        {
            let now = (*vm_pin_kib, *cpu_seconds);
            if self.last_sample.get(pid) == Some(&now) {
                return;
            }
            self.last_sample.insert(*pid, now);
        }
        if let Some(t) = self.lazy.take() {
            self.line(&t);
        }
        match serde_json::to_value(f) {
            Ok(v) => self.line(&v),
            Err(e) => self.error = Some(e.into()),
        }
    }

    /// The kernel aggregates, when they changed since the last line.
    fn aggregates(&mut self, rows: &[(AggKey, AggValue)]) {
        let mut now: Vec<(AggKey, u64, u64)> = rows.iter().map(|(k, v)| (*k, v.calls, v.bytes)).collect();
        now.sort_by_key(|x| x.0);
        if now == self.last_aggregates {
            return;
        }
        self.last_aggregates = now;
        self.lazy = None;
        self.line(&serde_json::json!({"type": "aggregates", "t_ns": monotonic_ns(), "rows": agg_json(rows)}));
    }

    /// Writes the footer and closes the file.
    pub fn finish(mut self, footer: &Footer) -> Result<()> {
        self.lazy = None;
        match serde_json::to_value(footer) {
            Ok(mut v) => {
                if let Some(m) = v.as_object_mut() {
                    m.insert("type".into(), "footer".into());
                }
                self.line(&v);
            }
            Err(e) => self.error = Some(e.into()),
        }
        if self.error.is_none()
            && let Err(e) = self.out.flush()
        {
            self.error = Some(e);
        }
        match self.error {
            Some(e) => Err(Error::io(format!("writing the recording {}", self.path.display()), e)),
            None => Ok(()),
        }
    }
}

/// The recorder observes the aggregator's inputs: each one is a line (ticks
/// and alive checks only when a fact follows them), each fact a line.
impl Observer for Recorder {
    fn input(&mut self, input: &Input) {
        match input {
            Input::Event(e) => self.event(e),
            Input::Target { pid, parent } => {
                self.input(serde_json::json!({"type": "target", "pid": pid, "parent": parent}));
            }
            Input::Tick => self.lazy_input(serde_json::json!({"type": "tick", "t_ns": monotonic_ns()})),
            Input::AliveCheck => {
                self.lazy_input(serde_json::json!({"type": "alive-check", "t_ns": monotonic_ns()}));
            }
            Input::SetupClosed => self.input(serde_json::json!({"type": "setup-closed", "t_ns": monotonic_ns()})),
            Input::Aggregates(rows) => self.aggregates(rows),
        }
    }

    fn fact(&mut self, fact: &Fact) {
        Recorder::fact(self, fact);
    }
}

/// Appends the workloads' own summaries after the footer (they are known
/// only once the command's report is complete).
pub fn append_workloads(path: &Path, workloads: &[Value]) -> Result<()> {
    if workloads.is_empty() {
        return Ok(());
    }
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| Error::io(format!("appending to the recording {}", path.display()), e))?;
    let line = serde_json::json!({"type": "workloads", "workloads": workloads});
    writeln!(f, "{line}").map_err(|e| Error::io(format!("appending to the recording {}", path.display()), e))
}

/// A parsed recording.
#[derive(Clone, Debug)]
pub struct Recording {
    pub header: Header,
    pub inputs: Vec<(Input, Vec<Fact>)>,
    pub footer: Footer,
    pub workloads: Vec<Value>,
}

/// Why a recording cannot be replayed: one line, with the line number.
pub fn parse(text: &str) -> std::result::Result<Recording, String> {
    read(&mut text.as_bytes())
}

/// Parses a recording line by line from `r` (the text is never held whole:
/// recordings of long jobs are large). Lines are bounded (`input::MAX_LINE`).
pub fn read(r: &mut dyn std::io::BufRead) -> std::result::Result<Recording, String> {
    let mut n = 0usize;
    let mut buf = String::new();
    // The next non-blank line and its number, or None at the end.
    let mut next = |buf: &mut String| -> std::result::Result<Option<usize>, String> {
        loop {
            n += 1;
            match crate::input::next_line(r, buf) {
                Ok(None) => return Ok(None),
                Ok(Some(())) if buf.trim().is_empty() => continue,
                Ok(Some(())) => return Ok(Some(n)),
                Err(e) => return Err(format!("line {n}: {e}")),
            }
        }
    };
    next(&mut buf)?.ok_or("empty file (no header line)")?;
    let first = buf.as_str();
    let h: Value = serde_json::from_str(first)
        .map_err(|e| format!("not a gdrtrace recording: line 1 is not a JSON header ({e})"))?;
    let schema = h["schema"].as_str().unwrap_or("");
    if h["type"] != "header" || !schema.starts_with(SCHEMA_PREFIX) {
        return Err(format!(
            "line 1: not a gdrtrace recording (expected a header with schema {SCHEMA})"
        ));
    }
    if schema != SCHEMA {
        let newer = schema[SCHEMA_PREFIX.len()..].parse::<u32>().is_ok_and(|v| v > 1);
        return Err(if newer {
            format!(
                "recording schema {schema} is newer than this gdrtrace ({}) reads ({SCHEMA}); replay it with a newer gdrtrace",
                env!("CARGO_PKG_VERSION")
            )
        } else {
            format!("unknown recording schema {schema} (expected {SCHEMA})")
        });
    }
    let header: Header = serde_json::from_value(h).map_err(|e| format!("line 1: header: {e}"))?;
    let mut inputs: Vec<(Input, Vec<Fact>)> = Vec::new();
    let mut footer = None;
    let mut workloads = Vec::new();
    while let Some(n) = next(&mut buf)? {
        let line = buf.as_str();
        let v: Value = serde_json::from_str(line).map_err(|e| format!("line {n}: not JSON ({e})"))?;
        let ty = v["type"]
            .as_str()
            .ok_or_else(|| format!("line {n}: no \"type\""))?
            .to_string();
        let ty = ty.as_str();
        if footer.is_some() {
            match ty {
                "workloads" => {
                    workloads = v["workloads"].as_array().cloned().unwrap_or_default();
                    continue;
                }
                _ => return Err(format!("line {n}: {ty} after the footer")),
            }
        }
        let input = match ty {
            "event" => Input::Event(event_of(&v).map_err(|e| format!("line {n}: {e}"))?),
            "target" => Input::Target {
                pid: num(&v["pid"]).ok_or_else(|| format!("line {n}: target without pid"))? as u32,
                parent: num(&v["parent"]).map(|p| p as u32),
            },
            "tick" => Input::Tick,
            "alive-check" => Input::AliveCheck,
            "setup-closed" => Input::SetupClosed,
            "aggregates" => Input::Aggregates(agg_of(&v).map_err(|e| format!("line {n}: {e}"))?),
            "process" | "env" | "sample" | "gone" | "space" => {
                let f: Fact = serde_json::from_value(v).map_err(|e| format!("line {n}: {ty}: {e}"))?;
                match inputs.last_mut() {
                    Some((_, facts)) => facts.push(f),
                    None => return Err(format!("line {n}: {ty} before any input")),
                }
                continue;
            }
            "footer" => {
                footer = Some(serde_json::from_value::<Footer>(v).map_err(|e| format!("line {n}: footer: {e}"))?);
                continue;
            }
            // Lines of later minor revisions are skipped, as report fields are.
            _ => continue,
        };
        inputs.push((input, Vec::new()));
    }
    let footer = footer.ok_or("truncated: no footer line (the recording was cut off before the trace ended)")?;
    let seen = inputs.iter().filter(|(i, _)| matches!(i, Input::Event(_))).count() as u64;
    if seen != footer.events {
        return Err(format!(
            "the footer counts {} events but the file holds {seen}: lines are missing",
            footer.events
        ));
    }
    Ok(Recording {
        header,
        inputs,
        footer,
        workloads,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_round_trip_and_hex_numbers() {
        let mut e = Event {
            kind: kind::CALL,
            op: op_code("ibv_reg_mr").unwrap(),
            pid: 10,
            tid: 11,
            start_ns: 5,
            dur_ns: 7,
            args: [1, 0x7f00_0000_1000, 4096, 0, 0, 0xdead_beef_0000_1234],
            ret: 0x5555_0000_1000,
            comm: [0; 16],
        };
        e.comm[..3].copy_from_slice(b"abc");
        let v = event_json(&e);
        assert_eq!(v["op"], "ibv_reg_mr");
        assert_eq!(v["args"][1], "0x7f0000001000");
        let back = event_of(&v).unwrap();
        assert_eq!(format!("{back:?}"), format!("{e:?}"));
        assert_eq!(num(&Value::from("-14")), Some((-14i64) as u64));
        assert_eq!(signed(-14), Value::from(-14));
        assert!(event_of(&serde_json::json!({"kind": "call", "op": "no_such_op", "pid": 1, "start_ns": 1})).is_err());
    }

    #[test]
    fn bad_recordings_are_refused_with_a_reason() {
        assert!(parse("").unwrap_err().contains("empty"));
        assert!(
            parse("{\"type\":\"header\",\"schema\":\"gdrtrace.recording/v9\"}")
                .unwrap_err()
                .contains("newer")
        );
        assert!(
            parse("{\"schema\":\"gdrtrace.report/v1\"}")
                .unwrap_err()
                .contains("not a gdrtrace recording")
        );
        let header = serde_json::to_string(&serde_json::json!({
            "type": "header", "schema": SCHEMA, "tool_version": "0", "host": {"kernel": "k", "lockdown": "none"},
            "facts": {}, "clock": "CLOCK_MONOTONIC", "started_ns": 0
        }))
        .unwrap();
        let ev = "{\"type\":\"event\",\"kind\":\"exit\",\"pid\":3,\"start_ns\":9}";
        assert!(parse(&format!("{header}\n{ev}\n")).unwrap_err().contains("truncated"));
        assert!(
            parse(&format!("{header}\n{ev}\n{{\"type\":"))
                .unwrap_err()
                .contains("line 3")
        );
        let footer = "{\"type\":\"footer\",\"command\":[],\"duration_s\":1.0,\"events\":2,\"loss\":{},\"pin_counters\":{},\"coverage\":[],\"kernel_slots\":[]}";
        assert!(
            parse(&format!("{header}\n{ev}\n{footer}\n"))
                .unwrap_err()
                .contains("missing")
        );
        let ok = parse(&format!("{header}\n{ev}\n{ev}\n{footer}\n")).unwrap();
        assert_eq!(ok.inputs.len(), 2);
    }
}
