//! The JSON form of events and kernel aggregates: every field named,
//! addresses and handles as hex, ops by name.
use super::*;

/// A number as written in a recording: JSON integer, or a `0x` hex string
/// (addresses and handles are written as hex, exact for any tool).
pub(super) fn num(v: &Value) -> Option<u64> {
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

/// A count, time or id (decimal or `0x` hex): a negative or fractional one
/// is refused, never wrapped (a recording edited to `"dur_ns": -5` would
/// replay as a 584-year call). None when absent.
pub(super) fn unsigned(v: &Value, field: &str) -> std::result::Result<Option<u64>, String> {
    let bad = || format!("{field} is {v}, not a non-negative integer");
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => n.as_u64().map(Some).ok_or_else(bad),
        Value::String(s) if !s.starts_with('-') => num(v).map(Some).ok_or_else(bad),
        _ => Err(bad()),
    }
}

/// A required [`unsigned`] field.
pub(super) fn required(v: &Value, field: &str) -> std::result::Result<u64, String> {
    unsigned(v, field)?.ok_or_else(|| format!("{field} missing"))
}

/// A process or thread id: [`unsigned`] and within 32 bits.
pub(super) fn pid_of(v: &Value, field: &str) -> std::result::Result<Option<u32>, String> {
    unsigned(v, field)?
        .map(|p| u32::try_from(p).map_err(|_| format!("{field} is {p}, not a process id")))
        .transpose()
}

pub(super) fn hex(v: u64) -> Value {
    Value::String(format!("{v:#x}"))
}

/// A signed value: a JSON integer when a double represents it exactly, hex otherwise.
pub(super) fn signed(v: i64) -> Value {
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
    if !tracer_common::has_comm(e.kind) {
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
    e.pid = pid_of(&v["pid"], "event field pid")?.ok_or("event field pid missing")?;
    e.tid = pid_of(&v["tid"], "event field tid")?.unwrap_or(e.pid);
    e.start_ns = required(&v["start_ns"], "event field start_ns")?;
    e.dur_ns = unsigned(&v["dur_ns"], "event field dur_ns")?.unwrap_or(0);
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
            let f = |k: &str| required(&r[k], &format!("aggregate row field {k}"));
            Ok((
                AggKey {
                    tgid: pid_of(&r["pid"], "aggregate row field pid")?.ok_or("aggregate row field pid missing")?,
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
