//! `--trace-event FILE`: the timeline of a trace as Chrome Trace Event JSON
//! (the format of `chrome://tracing`, Perfetto's legacy JSON importer,
//! speedscope and the torch profiler's Kineto traces), schema
//! `gdrtrace.trace-event/v1` (docs/timeline.md).
//!
//! - one track per process (`pid`) and thread (`tid`), named by
//!   `process_name` / `thread_name` metadata;
//! - every traced call a complete slice (`ph: "X"`), `ts`/`dur` in
//!   microseconds of `CLOCK_MONOTONIC` (the recording's `start_ns`/`dur_ns`
//!   to the nanosecond), with the transport verdict and evidence in `args`;
//! - each kernel-aggregated row (a communicator's collective) one slice per
//!   interval in which its totals changed, on a track of its own: the kernel
//!   keeps counts, not per-call times (`args.calls` says how many);
//! - per process a counter track (`ph: "C"`) of moved and staged bytes per
//!   second.
use std::{collections::BTreeMap, fmt::Write as _};

use serde_json::{Value, json};

use super::Report;
use crate::{
    classify::Transport,
    stats::timeline::{RowSlice, Timeline},
};

pub const SCHEMA: &str = "gdrtrace.trace-event/v1";

/// Track ids of the aggregated rows: above any thread id (`pid_max` is at
/// most 2^22), one per (op, communicator) of a process.
pub const ROW_TRACK_BASE: u32 = 1 << 30;

/// The shortest counter interval; longer traces get wider ones (at most
/// `MAX_BINS` per process).
const MIN_BIN_NS: u64 = 100_000_000;
const MAX_BINS: u64 = 2000;

/// Nanoseconds as microseconds with three decimals, exactly.
fn us(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

/// One event line: the fixed fields, then `args`.
fn event(out: &mut String, fields: &[(&str, Value)], ts: Option<u64>, dur: Option<u64>, args: &Value) {
    if !out.ends_with('[') {
        out.push(',');
    }
    out.push_str("\n{");
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "\"{k}\":{v}");
    }
    if let Some(ts) = ts {
        let _ = write!(out, ",\"ts\":{}", us(ts));
    }
    if let Some(d) = dur {
        let _ = write!(out, ",\"dur\":{}", us(d));
    }
    let _ = write!(out, ",\"args\":{args}}}");
}

/// The transport of an aggregated row: the verdict of its communicator
/// (the process's, once the trace is judged).
fn row_transport(report: &Report, r: &RowSlice) -> Transport {
    if let Some((_, t)) = &r.copy {
        return *t;
    }
    let comm = format!("{:#x}", r.handle);
    report
        .collectives
        .iter()
        .find(|c| c.pid == r.pid && c.op == r.op && c.communicator == comm)
        .map(|c| Transport::from_name(c.transport))
        .or_else(|| report.verdicts.iter().find(|v| v.pid == r.pid).map(|v| v.transport))
        .unwrap_or(Transport::Unknown)
}

/// Adds `bytes` spread evenly over `[from, to]` to the bins of width `w`.
fn spread(bins: &mut BTreeMap<u64, f64>, from: u64, to: u64, bytes: f64, w: u64) {
    if to <= from {
        *bins.entry(from / w).or_default() += bytes;
        return;
    }
    let span = (to - from) as f64;
    let mut t = from;
    while t < to {
        let b = t / w;
        let end = ((b + 1) * w).min(to);
        *bins.entry(b).or_default() += bytes * (end - t) as f64 / span;
        t = end;
    }
}

/// A metadata event naming a process's or a thread's track.
fn name_event(out: &mut String, what: &str, pid: u32, tid: u32, name: &str) {
    event(
        out,
        &[
            ("name", json!(what)),
            ("ph", json!("M")),
            ("pid", json!(pid)),
            ("tid", json!(tid)),
        ],
        None,
        None,
        &json!({ "name": name }),
    );
}

/// Moved and staged bytes per counter bin, per process.
#[derive(Default)]
struct Bins {
    moved: BTreeMap<u32, BTreeMap<u64, f64>>,
    staged: BTreeMap<u32, BTreeMap<u64, f64>>,
}

/// The track id of each aggregated row: (pid, op, handle) -> tid.
type RowTracks<'a> = BTreeMap<(u32, &'a str, u64), u32>;

/// The names of every process and thread track, and of the aggregated
/// rows' tracks (one each); returns the rows' track ids.
fn tracks<'a>(out: &mut String, tl: &'a Timeline, names: &BTreeMap<u32, &str>) -> RowTracks<'a> {
    // Processes: every one with a slice or a row.
    let mut pids: Vec<u32> = tl
        .slices
        .iter()
        .map(|s| s.pid)
        .chain(tl.rows.iter().map(|r| r.pid))
        .collect();
    pids.sort_unstable();
    pids.dedup();
    // Names as the process and thread call themselves: viewers add the ids.
    for pid in &pids {
        if let Some(name) = names.get(pid).copied().filter(|n| !n.is_empty()) {
            name_event(out, "process_name", *pid, *pid, name);
        }
    }
    let mut threads: Vec<(u32, u32)> = tl.slices.iter().map(|s| (s.pid, s.tid)).collect();
    threads.sort_unstable();
    threads.dedup();
    for (pid, tid) in &threads {
        let name = tl
            .threads
            .get(&(*pid, *tid))
            .map(String::as_str)
            .or_else(|| names.get(pid).copied())
            .unwrap_or("");
        if !name.is_empty() {
            name_event(out, "thread_name", *pid, *tid, name);
        }
    }
    // Aggregated rows: a track each.
    let mut tracks: RowTracks = BTreeMap::new();
    for r in &tl.rows {
        let n = tracks.iter().filter(|((p, _, _), _)| *p == r.pid).count() as u32;
        tracks
            .entry((r.pid, r.op.as_str(), r.handle))
            .or_insert(ROW_TRACK_BASE + n);
    }
    for ((pid, op, handle), tid) in &tracks {
        name_event(
            out,
            "thread_name",
            *pid,
            *tid,
            &format!("{op} {handle:#x} (kernel-aggregated)"),
        );
    }
    tracks
}

/// A slice per evented call, its bytes into the counter bins.
fn call_slices(out: &mut String, slices: &[&crate::stats::timeline::Slice], width: u64, bins: &mut Bins) {
    for s in slices {
        let args = json!({
            "transport": s.transport.name(),
            "evidence": s.evidence,
            "bytes": s.bytes,
            "failed": s.failed,
            "transfer": s.transfer,
            "tid": s.tid,
        });
        let cat = s.family.map_or("undecoded", |f| f.name());
        event(
            out,
            &[
                ("name", json!(s.op)),
                ("cat", json!(cat)),
                ("ph", json!("X")),
                ("pid", json!(s.pid)),
                ("tid", json!(s.tid)),
            ],
            Some(s.start_ns),
            Some(s.dur_ns),
            &args,
        );
        let end = s.start_ns + s.dur_ns;
        if s.moved_bytes > 0 {
            spread(
                bins.moved.entry(s.pid).or_default(),
                end,
                end,
                s.moved_bytes as f64,
                width,
            );
        }
        if s.staged_bytes > 0 {
            spread(
                bins.staged.entry(s.pid).or_default(),
                end,
                end,
                s.staged_bytes as f64,
                width,
            );
        }
    }
}

/// A slice per interval of each kernel-aggregated row, its bytes spread
/// over the interval into the counter bins.
fn row_slices(out: &mut String, tl: &Timeline, report: &Report, tracks: &RowTracks, width: u64, bins: &mut Bins) {
    for r in &tl.rows {
        let transport = row_transport(report, r);
        let tid = tracks[&(r.pid, r.op.as_str(), r.handle)];
        let (name, cat, evidence) = match &r.copy {
            Some((label, _)) => (
                label.as_str(),
                "copy-aggregated",
                format!(
                    "{} copies of row {:#x} counted in the kernel in this interval (no per-call times; the first has its own slice); verdict of the row's first call",
                    r.calls, r.handle
                ),
            ),
            None => (
                r.op.as_str(),
                "collective-aggregated",
                format!(
                    "{} calls on communicator {:#x} counted in the kernel in this interval (no per-call times); transport of the process's verdict",
                    r.calls, r.handle
                ),
            ),
        };
        event(
            out,
            &[
                ("name", json!(name)),
                ("cat", json!(cat)),
                ("ph", json!("X")),
                ("pid", json!(r.pid)),
                ("tid", json!(tid)),
            ],
            Some(r.from_ns),
            Some(r.to_ns - r.from_ns),
            &json!({
                "transport": transport.name(),
                "evidence": evidence,
                "calls": r.calls,
                "bytes": r.bytes,
                "communicator": format!("{:#x}", r.handle),
            }),
        );
        let bytes = r.bytes as f64;
        spread(bins.moved.entry(r.pid).or_default(), r.from_ns, r.to_ns, bytes, width);
        if transport.staged() {
            spread(bins.staged.entry(r.pid).or_default(), r.from_ns, r.to_ns, bytes, width);
        }
    }
}

/// The counter track of each process: moved and staged bytes per second,
/// an event where either changes.
fn counters(out: &mut String, bins: &Bins, width: u64) {
    let per_s = 1e9 / width as f64;
    for pid in bins
        .moved
        .keys()
        .chain(bins.staged.keys())
        .collect::<std::collections::BTreeSet<_>>()
    {
        let (m, s) = (bins.moved.get(pid), bins.staged.get(pid));
        let at_bins: std::collections::BTreeSet<u64> = m
            .into_iter()
            .chain(s)
            .flat_map(|b| b.keys().flat_map(|k| [*k, k + 1]))
            .collect();
        let mut prev = None;
        for b in at_bins {
            let at = |x: Option<&BTreeMap<u64, f64>>| x.and_then(|x| x.get(&b)).map_or(0.0, |v| (v * per_s).round());
            let now = (at(m), at(s));
            if prev == Some(now) {
                continue;
            }
            prev = Some(now);
            event(
                out,
                &[("name", json!("bytes/s")), ("ph", json!("C")), ("pid", json!(pid))],
                Some(b * width),
                None,
                &json!({ "moved": now.0, "staged": now.1 }),
            );
        }
    }
}

/// The timeline as Chrome Trace Event JSON (object form).
pub fn render(tl: &Timeline, report: &Report) -> String {
    let mut out = String::from("{\"traceEvents\":[");
    let names: BTreeMap<u32, &str> = report.processes.iter().map(|p| (p.pid, p.comm.as_str())).collect();
    let tracks = tracks(&mut out, tl, &names);
    let mut slices: Vec<_> = tl.slices.iter().collect();
    slices.sort_by_key(|s| (s.start_ns, std::cmp::Reverse(s.dur_ns)));
    // Counter bins: at most MAX_BINS over the trace, each a multiple of MIN_BIN_NS.
    let first = slices
        .first()
        .map(|s| s.start_ns)
        .into_iter()
        .chain(tl.rows.iter().map(|r| r.from_ns))
        .min()
        .unwrap_or(0);
    let last = slices
        .iter()
        .map(|s| s.start_ns + s.dur_ns)
        .chain(tl.rows.iter().map(|r| r.to_ns))
        .max()
        .unwrap_or(0);
    let width = (last.saturating_sub(first) / MAX_BINS).div_ceil(MIN_BIN_NS).max(1) * MIN_BIN_NS;
    let mut bins = Bins::default();
    call_slices(&mut out, &slices, width, &mut bins);
    row_slices(&mut out, tl, report, &tracks, width, &mut bins);
    counters(&mut out, &bins, width);
    out.push_str("\n],\"displayTimeUnit\":\"ns\",\"otherData\":");
    let other = json!({
        "schema": SCHEMA,
        "tool_version": crate::version::VERSION,
        "clock": "CLOCK_MONOTONIC",
        "command": report.command,
        "slices": tl.slices.len(),
        "aggregated_slices": tl.rows.len(),
        "counter_interval_ms": width / 1_000_000,
    });
    let _ = writeln!(out, "{other}}}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn export(name: &str) -> Value {
        let rec = crate::cmd::replay::load(&crate::fixtures::dir().join(name)).expect("fixture loads");
        let (_, _, tl) = crate::cmd::replay::rebuild_full(&rec, None, None, true).expect("replays");
        serde_json::from_str(&tl.expect("a timeline")).expect("the timeline is JSON")
    }

    fn events<'a>(v: &'a Value, ph: &str) -> Vec<&'a Value> {
        v["traceEvents"]
            .as_array()
            .expect("traceEvents")
            .iter()
            .filter(|e| e["ph"] == ph)
            .collect()
    }

    #[test]
    fn times_are_exact_microseconds() {
        assert_eq!(us(1_234_567_891), "1234567.891");
        assert_eq!(us(5), "0.005");
        let mut bins = BTreeMap::new();
        spread(&mut bins, 50, 250, 200.0, 100);
        assert_eq!(bins, BTreeMap::from([(0, 50.0), (1, 100.0), (2, 50.0)]));
    }

    #[test]
    fn staged_pair_shows_on_the_staged_counter() {
        let v = export("standin-peer-copy-enabled.rec");
        let x = events(&v, "X");
        let h2d = x
            .iter()
            .find(|e| e["name"] == "cuMemcpyHtoD")
            .expect("the H2D half of the pair");
        assert_eq!(h2d["args"]["transfer"], true);
        assert!(h2d["args"]["evidence"].as_str().is_some_and(|e| !e.is_empty()));
        let peer = x.iter().find(|e| e["name"] == "cuMemcpyPeer").expect("a peer copy");
        assert_eq!(peer["args"]["transport"], "p2p/nvlink");
        let staged = events(&v, "C")
            .iter()
            .filter_map(|e| e["args"]["staged"].as_f64())
            .fold(0.0, f64::max);
        assert!(staged > 0.0, "the D2H+H2D pair crossed host memory");
        let names: Vec<&Value> = events(&v, "M");
        assert!(names.iter().any(|e| e["name"] == "process_name"));
        assert!(names.iter().any(|e| e["name"] == "thread_name"));
    }
}
