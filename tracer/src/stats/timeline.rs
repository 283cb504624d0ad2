//! What a timeline (`--trace-event FILE`) needs, collected from the
//! aggregator's inputs as they are handled: one slice per call (with the
//! verdict and evidence the classifier gave it), one slice per
//! kernel-aggregated row and interval in which its totals changed, and the
//! names of threads. Live tracing and replay feed the same inputs, so they
//! collect the same timeline; `report::timeline` writes it out.
use std::collections::BTreeMap;

use tracer_common::{AggKey, AggValue, Event, kind};

use super::copies::KernelRow;
use crate::{classify::Call, probes::Family};

/// One traced call.
#[derive(Clone, Debug)]
pub struct Slice {
    pub pid: u32,
    pub tid: u32,
    pub start_ns: u64,
    /// Zero for entry-only records.
    pub dur_ns: u64,
    pub op: String,
    /// None: the tracer could not interpret the call.
    pub family: Option<Family>,
    pub transport: crate::classify::Transport,
    pub evidence: String,
    pub bytes: u64,
    pub failed: bool,
    /// A transfer (copy, registration, pinned batch): the transfer records hold it too.
    pub transfer: bool,
    /// Bytes a copy moved (zero for other calls and failed copies).
    pub moved_bytes: u64,
    /// Bytes that crossed host memory (staged copies, the second half of a
    /// D2H+H2D pair through one host buffer).
    pub staged_bytes: u64,
}

/// The calls of one kernel-aggregated row (a communicator's collective, or
/// a copy row) between two reads of the kernel's totals in which they
/// changed: the kernel keeps no per-call times, so this is one slice per
/// interval.
#[derive(Clone, Debug)]
pub struct RowSlice {
    /// (pid, op, handle): the row's key in the kernel's table.
    pub row: KernelRow,
    pub op: String,
    pub from_ns: u64,
    pub to_ns: u64,
    pub calls: u64,
    pub bytes: u64,
    /// A copy row (`op_flags::COPY_ROWS`: copies counted per address
    /// pair), known from its op; else a communicator's collective.
    pub copy: bool,
}

impl RowSlice {
    pub fn pid(&self) -> u32 {
        self.row.0
    }

    pub fn handle(&self) -> u64 {
        self.row.2
    }
}

/// A copy row's first call, as classified (its later calls share its verdict).
#[derive(Clone, Debug)]
pub struct FirstCall {
    pub label: String,
    pub transport: crate::classify::Transport,
    pub start_ns: u64,
}

#[derive(Debug, Default)]
pub struct Timeline {
    /// When the trace began (`CLOCK_MONOTONIC`): the first interval of an
    /// aggregated row starts there.
    pub started_ns: u64,
    pub slices: Vec<Slice>,
    pub rows: Vec<RowSlice>,
    /// The command name of each thread, from its events.
    pub threads: BTreeMap<(u32, u32), String>,
    /// Each copy row's first call, whenever it arrived: its event may come
    /// after the totals that already count it (the ring buffer is read
    /// after the map), so rows are resolved when the timeline is written.
    pub firsts: BTreeMap<KernelRow, FirstCall>,
    /// When each communicator (pid, handle) was made: its collectives
    /// cannot begin before.
    pub comms: BTreeMap<(u32, u64), u64>,
    /// Kernel totals per row at the last change, and when it was read.
    last: BTreeMap<KernelRow, (u64, u64)>,
    last_ns: Option<u64>,
}

impl Timeline {
    pub fn new(started_ns: u64) -> Self {
        Timeline {
            started_ns,
            ..Default::default()
        }
    }

    /// Names the thread of an event (every kind carries its `comm`).
    pub fn thread(&mut self, e: &Event) {
        if e.kind == kind::FORK {
            return;
        }
        let end = e.comm.iter().position(|&b| b == 0).unwrap_or(e.comm.len());
        if end > 0 {
            self.threads
                .entry((e.pid, e.tid))
                .or_insert_with(|| String::from_utf8_lossy(&e.comm[..end]).into_owned());
        }
    }

    /// A classified call (`c` None: the tracer could not interpret it).
    pub fn call(&mut self, e: &Event, c: Option<&Call>, transfer: bool, moved_bytes: u64) {
        let (op, family, transport, evidence, bytes, failed) = match c {
            Some(c) => (
                c.label.clone(),
                Some(c.family),
                c.transport,
                c.evidence.clone(),
                c.bytes,
                c.failed,
            ),
            None => (
                crate::probes::ops::op_name(e.op),
                None,
                crate::classify::Transport::Unknown,
                "not interpreted (argument layout unknown to this build)".into(),
                0,
                false,
            ),
        };
        let staged_bytes = if transport.staged() { moved_bytes } else { 0 };
        self.slices.push(Slice {
            pid: e.pid,
            tid: e.tid,
            start_ns: e.start_ns,
            dur_ns: if e.kind == kind::CALL { e.dur_ns } else { 0 },
            op,
            family,
            transport,
            evidence,
            bytes,
            failed,
            transfer,
            moved_bytes,
            staged_bytes,
        });
    }

    /// A copy row's first call (`kind::ROW_FIRST`).
    pub fn row_first(&mut self, row: KernelRow, c: &Call, start_ns: u64) {
        self.firsts.entry(row).or_insert_with(|| FirstCall {
            label: c.label.clone(),
            transport: c.transport,
            start_ns,
        });
    }

    /// A communicator made by a call that returned at `end_ns`.
    pub fn communicator(&mut self, pid: u32, handle: u64, end_ns: u64) {
        self.comms.entry((pid, handle)).or_insert(end_ns);
    }

    /// When a row's calls could have begun at the earliest: its first call
    /// (copies) or its communicator's set-up (collectives), when seen.
    pub fn row_began(&self, r: &RowSlice) -> Option<u64> {
        if r.copy {
            self.firsts.get(&r.row).map(|f| f.start_ns)
        } else {
            self.comms.get(&(r.pid(), r.handle())).copied()
        }
    }

    /// The last slice completed a D2H+H2D pair through one host buffer:
    /// `bytes` crossed host memory.
    pub fn staged_pair(&mut self, bytes: u64) {
        if let Some(s) = self.slices.last_mut()
            && s.staged_bytes == 0
        {
            s.staged_bytes = bytes;
        }
    }

    /// The kernel's cumulative totals read at `t_ns`: a slice for each row
    /// whose totals moved since the last change (the recorder writes the
    /// totals only when they change, so a replay sees the same changes).
    pub fn aggregates(&mut self, t_ns: u64, rows: &[(AggKey, AggValue)], keep: impl Fn(&AggKey) -> bool) {
        let now: BTreeMap<KernelRow, (u64, u64)> = rows
            .iter()
            .filter(|(k, _)| keep(k))
            .map(|(k, v)| ((k.tgid, k.op, k.handle), (v.calls, v.bytes)))
            .collect();
        if now == self.last {
            return;
        }
        let from_ns = self.last_ns.unwrap_or(self.started_ns).min(t_ns);
        for (key, (calls, bytes)) in &now {
            let (c0, b0) = self.last.get(key).copied().unwrap_or((0, 0));
            if *calls > c0 {
                self.rows.push(RowSlice {
                    row: *key,
                    copy: crate::probes::uapi::row_of(key.1).is_some_and(|(_, r)| r.copy_rows()),
                    op: crate::probes::ops::op_name(key.1),
                    from_ns,
                    to_ns: t_ns,
                    calls: calls - c0,
                    bytes: bytes.saturating_sub(b0),
                });
            }
        }
        self.last = now;
        self.last_ns = Some(t_ns);
    }
}
