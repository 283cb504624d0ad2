//! The lines of a recording as typed records (serde derive): events and
//! kernel aggregates with every field named, addresses and handles as hex,
//! ops by name. Each line is one of these records with its `"type"`
//! (`Line::TYPE`); the numbers a recording holds read through three types
//! of their own: [`Count`] (counts, times, ids: never negative), [`Hex`]
//! (addresses, handles, arguments) and [`Ret`] (a return value).
use std::fmt;

use serde::{
    Deserialize, Deserializer, Serialize, Serializer,
    de::{self, Visitor},
};
use tracer_common::{AggKey, AggValue, Event};

use crate::probes::ops::{kind_code, kind_name, op_code, op_name};

/// A number as written in a recording: a JSON integer, or a string of
/// decimal digits (`-` allowed) or `0x` hex digits (addresses and handles
/// are written as hex, exact for any tool).
fn parse_num(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.strip_prefix('-').map_or_else(
            || s.parse().ok(),
            |d| d.parse::<i64>().ok().map(|i| i.wrapping_neg() as u64),
        ),
    }
}

/// A count, time or id (decimal or `0x` hex): a negative or fractional one
/// is refused, never wrapped (a recording edited to `"dur_ns": -5` would
/// replay as a 584-year call).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Count(pub u64);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a non-negative integer")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Count, E> {
                Ok(Count(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Count, E> {
                u64::try_from(v)
                    .map(Count)
                    .map_err(|_| E::custom(format!("{v} is not a non-negative integer")))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Count, E> {
                Err(E::custom(format!("{v} is not a non-negative integer")))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Count, E> {
                match parse_num(s) {
                    Some(v) if !s.starts_with('-') => Ok(Count(v)),
                    _ => Err(E::custom(format!("\"{s}\" is not a non-negative integer"))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// A process or thread id: a [`Count`] within 32 bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Pid(pub u32);

impl<'de> Deserialize<'de> for Pid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Count(p) = Count::deserialize(d)?;
        u32::try_from(p)
            .map(Pid)
            .map_err(|_| de::Error::custom(format!("{p} is not a process id")))
    }
}

/// A 64-bit value written as `0x` hex (addresses, handles, arguments);
/// read from hex, a decimal string or a JSON integer (a negative one is
/// its two's complement).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hex(pub u64);

impl Serialize for Hex {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{:#x}", self.0))
    }
}

/// The visitor of [`Hex`] and [`Ret`]: any integer, as its 64 bits.
struct Bits;

impl Visitor<'_> for Bits {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a number (integer, decimal or 0x hex string)")
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        Ok(v as u64)
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<u64, E> {
        parse_num(s).ok_or_else(|| E::custom(format!("\"{s}\" is not a number")))
    }
}

impl<'de> Deserialize<'de> for Hex {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Bits).map(Hex)
    }
}

/// A return value: a JSON integer when a double represents it exactly,
/// hex otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ret(pub i64);

impl Serialize for Ret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.unsigned_abs() < (1 << 53) {
            s.serialize_i64(self.0)
        } else {
            Hex(self.0 as u64).serialize(s)
        }
    }
}

impl<'de> Deserialize<'de> for Ret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Bits).map(|v| Ret(v as i64))
    }
}

/// A line's `type`.
pub trait Line: Serialize {
    const TYPE: &'static str;
}

/// An `event` line: one ring-buffer record.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EventLine {
    /// `call`, `fork`, `exit`, `exec`, `entry`, `row-first`.
    pub kind: String,
    /// The op by name (library ops are resolved by name: their codes are
    /// table indices and may move between versions), absent on lifecycle
    /// records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op_code: Option<u32>,
    pub pid: Pid,
    #[serde(default)]
    pub tid: Option<Pid>,
    pub start_ns: Count,
    #[serde(default)]
    pub dur_ns: Count,
    #[serde(default)]
    pub args: Vec<Hex>,
    #[serde(default)]
    pub ret: Ret,
    #[serde(default)]
    pub comm: String,
}

impl Line for EventLine {
    const TYPE: &'static str = "event";
}

impl EventLine {
    /// The line of one event.
    pub fn of(e: &Event) -> Self {
        let end = e.comm.iter().position(|&b| b == 0).unwrap_or(e.comm.len());
        let named = !tracer_common::has_comm(e.kind);
        EventLine {
            kind: kind_name(e.kind).into(),
            op: named.then(|| op_name(e.op)),
            op_code: named.then_some(e.op),
            pid: Pid(e.pid),
            tid: Some(Pid(e.tid)),
            start_ns: Count(e.start_ns),
            dur_ns: Count(e.dur_ns),
            args: e.args.iter().map(|a| Hex(*a)).collect(),
            ret: Ret(e.ret),
            comm: String::from_utf8_lossy(&e.comm[..end]).into_owned(),
        }
    }

    /// The event it records, ops resolved by name first.
    pub fn event(&self) -> Result<Event, String> {
        let mut e = Event {
            kind: kind_code(&self.kind).ok_or_else(|| format!("unknown event kind \"{}\"", self.kind))?,
            ..Default::default()
        };
        if let Some(name) = &self.op {
            e.op = op_code(name)
                .or(self.op_code)
                .ok_or_else(|| format!("unknown op {name} (recorded by a newer gdrtrace?)"))?;
        }
        e.pid = self.pid.0;
        e.tid = self.tid.map_or(e.pid, |t| t.0);
        e.start_ns = self.start_ns.0;
        e.dur_ns = self.dur_ns.0;
        if self.args.len() > e.args.len() {
            return Err(format!("event has {} args (at most {})", self.args.len(), e.args.len()));
        }
        for (slot, a) in e.args.iter_mut().zip(&self.args) {
            *slot = a.0;
        }
        e.ret = self.ret.0;
        let comm = self.comm.as_bytes();
        let n = comm.len().min(e.comm.len() - 1);
        e.comm[..n].copy_from_slice(&comm[..n]);
        Ok(e)
    }
}

/// One row of the kernel-aggregated calls.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AggRow {
    pub pid: Pid,
    #[serde(default)]
    pub op: Option<String>,
    #[serde(default)]
    pub op_code: Option<u32>,
    #[serde(default)]
    pub handle: Hex,
    pub calls: Count,
    pub bytes: Count,
}

/// An `aggregates` line: the kernel's cumulative totals, read at `t_ns`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Aggregates {
    #[serde(default)]
    pub t_ns: Count,
    pub rows: Vec<AggRow>,
}

impl Line for Aggregates {
    const TYPE: &'static str = "aggregates";
}

impl Aggregates {
    pub fn of(t_ns: u64, rows: &[(AggKey, AggValue)]) -> Self {
        Aggregates {
            t_ns: Count(t_ns),
            rows: rows
                .iter()
                .map(|(k, v)| AggRow {
                    pid: Pid(k.tgid),
                    op: Some(op_name(k.op)),
                    op_code: Some(k.op),
                    handle: Hex(k.handle),
                    calls: Count(v.calls),
                    bytes: Count(v.bytes),
                })
                .collect(),
        }
    }

    pub fn rows(&self) -> Result<Vec<(AggKey, AggValue)>, String> {
        self.rows
            .iter()
            .map(|r| {
                let op =
                    r.op.as_deref().and_then(op_code).or(r.op_code).ok_or_else(|| {
                        format!("aggregate row with unknown op {}", r.op.as_deref().unwrap_or("null"))
                    })?;
                Ok((
                    AggKey {
                        tgid: r.pid.0,
                        op,
                        handle: r.handle.0,
                    },
                    AggValue {
                        calls: r.calls.0,
                        bytes: r.bytes.0,
                    },
                ))
            })
            .collect()
    }
}

/// A `target` line: a process added to the trace.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Target {
    pub pid: Pid,
    #[serde(default)]
    pub parent: Option<Pid>,
}

impl Line for Target {
    const TYPE: &'static str = "target";
}

/// A `clock` line: the kernel's totals read at `t_ns`, the same as the
/// `aggregates` line before it, after a `duty` line (the duty cycle's
/// estimates take when each interval's counts were read from it).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Clock {
    pub t_ns: Count,
}

impl Line for Clock {
    const TYPE: &'static str = "clock";
}

/// A `duty` line: one tick of the sampled rows' duty cycle.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Duty {
    pub on_us: Count,
    pub off_us: Count,
    /// The uncounted rest of the tick, after its `aggregates` line (an on
    /// phase ended in it); absent in recordings before 2026-12-04, whose
    /// rests replay as ticks of their own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rest: bool,
    /// The CPU time each process of sampled rows ran in `on_us`, in
    /// microseconds, where it was read: [pid, us] pairs (absent where
    /// none was, and in recordings before 2026-12-06).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpu: Vec<(Pid, Count)>,
}

impl Line for Duty {
    const TYPE: &'static str = "duty";
}

/// A `trap-cost` line: what one probed entry and one entry and return cost
/// on this host, as the duty cycle's estimates correct for it, and an
/// entry whose first instruction is single-stepped.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrapCost {
    pub entry_ns: f64,
    pub pair_ns: f64,
    /// An entry trap on a single-stepped first instruction (absent in
    /// recordings made before it was measured: an entry's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stepped_ns: Option<f64>,
}

impl Line for TrapCost {
    const TYPE: &'static str = "trap-cost";
}

/// A `stepped` line: a process's rows probed on a first instruction the
/// kernel single-steps (`Input::Stepped`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Stepped {
    pub pid: Pid,
    pub rows: Vec<String>,
}

impl Line for Stepped {
    const TYPE: &'static str = "stepped";
}

/// An `exact-rows` line: the ops whose rows are counted exactly through
/// the duty cycle's off phases from here on (`Input::ExactRows`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ExactRows {
    pub ops: Vec<String>,
}

impl Line for ExactRows {
    const TYPE: &'static str = "exact-rows";
}

/// An `nccl-ras` line: what NCCL's RAS service answered (`--nccl-ras`).
impl Line for crate::identity::RasQuery {
    const TYPE: &'static str = "nccl-ras";
}

/// When a `tick`, `alive-check` or `setup-closed` line was written (read
/// back it is not needed: the input is the line's type).
#[derive(Clone, Debug, Serialize)]
pub struct Beat {
    pub t_ns: u64,
}

/// The `workloads` line after the footer: the workloads' own summaries.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Workloads {
    #[serde(default)]
    pub workloads: Vec<serde_json::Value>,
}

impl Line for Workloads {
    const TYPE: &'static str = "workloads";
}

/// The `type` of a line, every other value of it walked to its end and
/// dropped: serde_json's recursion limit (128 levels) applies to them, which
/// it does not to values skipped as unknown fields (a line nested deeper
/// than any reader of JSON values takes is damage, not a record).
pub(super) struct Type<'a> {
    pub ty: Option<std::borrow::Cow<'a, str>>,
}

impl<'de> Deserialize<'de> for Type<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = Type<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Type<'de>, A::Error> {
                let mut ty = None;
                while let Some(key) = m.next_key::<TypeKey>()? {
                    match key {
                        TypeKey::Type if ty.is_none() => ty = Some(m.next_value::<Text<'de>>()?.0),
                        _ => {
                            m.next_value::<Walked>()?;
                        }
                    }
                }
                Ok(Type { ty })
            }
        }
        d.deserialize_map(Fields)
    }
}

/// A key of a line: `type` or another.
enum TypeKey {
    Type,
    Other,
}

impl<'de> Deserialize<'de> for TypeKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Key;
        impl serde::de::Visitor<'_> for Key {
            type Value = TypeKey;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E>(self, k: &str) -> Result<TypeKey, E> {
                Ok(if k == "type" { TypeKey::Type } else { TypeKey::Other })
            }
        }
        d.deserialize_identifier(Key)
    }
}

/// A string, borrowed from the line where it has no escapes.
struct Text<'a>(std::borrow::Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct S;
        impl<'de> serde::de::Visitor<'de> for S {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(s.into()))
            }
            fn visit_str<E>(self, s: &str) -> Result<Text<'de>, E> {
                Ok(Text(s.to_owned().into()))
            }
        }
        d.deserialize_str(S)
    }
}

/// Any JSON value, read through (not ignored: see [`Type`]) and dropped.
struct Walked;

impl<'de> Deserialize<'de> for Walked {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Any;
        impl<'de> serde::de::Visitor<'de> for Any {
            type Value = Walked;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Walked, E> {
                Ok(Walked)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Walked, E> {
                Ok(Walked)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Walked, E> {
                Ok(Walked)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Walked, E> {
                Ok(Walked)
            }
            fn visit_str<E>(self, _: &str) -> Result<Walked, E> {
                Ok(Walked)
            }
            fn visit_unit<E>(self) -> Result<Walked, E> {
                Ok(Walked)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut s: A) -> Result<Walked, A::Error> {
                while s.next_element::<Walked>()?.is_some() {}
                Ok(Walked)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Walked, A::Error> {
                while m.next_entry::<serde::de::IgnoredAny, Walked>()?.is_some() {}
                Ok(Walked)
            }
        }
        d.deserialize_any(Any)
    }
}

/// A line's JSON: the record with its `type`, keys in order (the form
/// recordings have always had).
pub fn line_json<T: Serialize>(ty: &str, record: &T) -> serde_json::Result<serde_json::Value> {
    let mut v = serde_json::to_value(record)?;
    if let Some(m) = v.as_object_mut() {
        m.insert("type".into(), ty.into());
    }
    Ok(v)
}
