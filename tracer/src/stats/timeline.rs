//! What a timeline (`--trace-event FILE`) needs, collected from the
//! aggregator's inputs as they are handled: one slice per call (with the
//! verdict and evidence the classifier gave it), one slice per
//! kernel-aggregated row and interval in which its totals changed, and the
//! names of threads. Live tracing and replay feed the same inputs, so they
//! collect the same timeline; `report::timeline` writes it out.
use std::collections::BTreeMap;

use tracer_common::{AggKey, AggValue, Event, kind};

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

/// The calls of one kernel-aggregated row (a communicator's collective)
/// between two reads of the kernel's totals in which they changed: the
/// kernel keeps no per-call times, so this is one slice per interval.
#[derive(Clone, Debug)]
pub struct RowSlice {
    pub pid: u32,
    pub op: String,
    pub handle: u64,
    pub from_ns: u64,
    pub to_ns: u64,
    pub calls: u64,
    pub bytes: u64,
    /// A copy row (copies counted in the kernel per address pair): the
    /// label and verdict of its first call, which has a slice of its own.
    pub copy: Option<(String, crate::classify::Transport)>,
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
    /// Kernel totals per row at the last change, and when it was read.
    last: BTreeMap<super::copies::KernelRow, (u64, u64)>,
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
    pub fn aggregates<'a>(
        &mut self,
        t_ns: u64,
        rows: &[(AggKey, AggValue)],
        keep: impl Fn(&AggKey) -> bool,
        copy: impl Fn(&AggKey) -> Option<&'a Call>,
    ) {
        let now: BTreeMap<super::copies::KernelRow, (u64, u64)> = rows
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
                let k = AggKey {
                    tgid: key.0,
                    op: key.1,
                    handle: key.2,
                };
                self.rows.push(RowSlice {
                    copy: copy(&k).map(|c| (c.label.clone(), c.transport)),
                    pid: key.0,
                    op: crate::probes::ops::op_name(key.1),
                    handle: key.2,
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
