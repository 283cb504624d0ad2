//! The kernel's aggregated rows, every tick: collectives, group and UCX
//! data calls per (process, op, handle), copies per kernel row, socket
//! data calls per process; the duty cycle's estimates of what was not
//! counted, and the figures they add to.
use std::collections::{BTreeMap, BTreeSet};

use tracer_common::{AggKey, AggValue};

use super::{Aggregator, RowKey, SocketTotals, copies::KernelRow, feed::Input, sampled_rows};
use crate::classify::transfer;

/// A process and an op's name.
type ProcOp = (u32, String);

/// What one tick's rows hold besides the collectives: the copy rows'
/// totals, and each process's socket totals, calls per socket op and
/// sockets (fds) that moved data.
#[derive(Default)]
struct OtherRows {
    copies: BTreeMap<KernelRow, (u64, u64)>,
    sockets: BTreeMap<u32, SocketTotals>,
    socket_calls: BTreeMap<ProcOp, u64>,
    fds: BTreeSet<(u32, u64)>,
}

impl Aggregator {
    /// The kernel's totals read at `t_ns`, the same as last read (replayed
    /// from a recording's `clock` line): the duty cycle's pending interval
    /// gets its counts, read then.
    pub fn same_aggregates(&mut self, t_ns: u64) {
        self.observe(|| Input::Clock { t_ns });
        self.counts_read_at(t_ns);
    }

    /// The counts of the duty cycle's last interval, read at `t_ns`.
    fn counts_read_at(&mut self, t_ns: u64) {
        self.estimator.clock(t_ns);
        self.estimator.counts(&sampled_rows(
            &self.collectives_counted,
            &self.copies.counted(),
            &self.io_counted,
        ));
    }

    /// Replaces the kernel-aggregated totals (they are cumulative) and
    /// reflects them in the per-process call counts.
    pub fn set_aggregates(&mut self, t_ns: u64, rows: &[(AggKey, AggValue)]) {
        self.observe(|| Input::Aggregates {
            t_ns,
            rows: rows.to_vec(),
        });
        if let Some(t) = &mut self.timeline {
            let copies = &self.copies;
            t.aggregates(
                t_ns,
                rows,
                |k| crate::probes::catalog::socket_direction(k.op).is_none(),
                |k| copies.call_of(k.tgid, k.op, k.handle),
            );
        }
        let OtherRows {
            copies,
            mut sockets,
            socket_calls,
            fds,
        } = self.count_rows(rows);
        self.processes_of_collectives();
        self.io_rows_tick();
        self.read_connections();
        for ((pid, name), calls) in socket_calls {
            if let Some(p) = self.procs.get_mut(&pid) {
                p.calls.insert(name, calls);
            }
        }
        self.copies.set_kernel(copies);
        self.counts_read_at(t_ns);
        self.scale_collectives();
        for (pid, p) in self.procs.iter_mut() {
            p.socket = sockets.remove(pid).unwrap_or_default();
            p.socket.sockets = fds.iter().filter(|(t, _)| t == pid).count() as u64;
        }
        self.window_tick();
    }

    /// The tick's evidence into the windows of the paths that ran in it.
    fn window_tick(&mut self) {
        let totals = self
            .procs
            .iter()
            .map(|(pid, p)| {
                let c = self.ucx.procs.get(pid).map(|s| &s.copies);
                let copies = c.map_or([0; 3], |c| [c.gpu_host_bytes, c.gpu_gpu_bytes, c.unknown_bytes]);
                let socket = p.socket.bytes_sent + p.socket.bytes_received;
                let (files, nvfs_ioctls) = self.file_totals(*pid);
                let t = super::windows::Totals {
                    copies,
                    socket,
                    files,
                    nvfs_ioctls,
                };
                (*pid, t)
            })
            .collect();
        self.windows.tick(self.collectives.iter().chain(&self.io), &totals);
    }

    /// The collective rows as counted (replaced); the other rows sorted
    /// out for their own figures.
    fn count_rows(&mut self, rows: &[(AggKey, AggValue)]) -> OtherRows {
        self.collectives_counted.clear();
        self.io_counted.clear();
        self.p2pdma.clear();
        let mut other = OtherRows::default();
        for (k, v) in rows {
            let name = crate::probes::ops::op_name(k.op);
            let row = crate::probes::uapi::row_of(k.op).map(|(_, r)| r);
            // cuFile's rows and the file syscalls: the file paths' own rows.
            if row.is_some_and(|r| r.lib == crate::probes::uapi::Lib::Cufile)
                || crate::probes::catalog::file_evidence_op(k.op)
            {
                if matches!(
                    k.op,
                    tracer_common::op::P2PDMA_MAP_SEGMENT | tracer_common::op::P2PDMA_MAP_TYPE
                ) {
                    *self.p2pdma.entry(k.tgid).or_default() += v.calls;
                } else {
                    let e = self.io_counted.entry((k.tgid, name, k.handle)).or_default();
                    e.0 += v.calls;
                    e.1 += v.bytes;
                }
                continue;
            }
            if row.is_some_and(|r| r.copy_rows()) {
                let e = other.copies.entry((k.tgid, k.op, k.handle)).or_default();
                e.0 += v.calls;
                e.1 += v.bytes;
                continue;
            }
            if let Some(sent) = crate::probes::catalog::socket_direction(k.op) {
                let t = other.sockets.entry(k.tgid).or_default();
                t.calls += v.calls;
                if sent {
                    t.bytes_sent += v.bytes;
                } else {
                    t.bytes_received += v.bytes;
                }
                if v.bytes > 0 {
                    other.fds.insert((k.tgid, k.handle));
                }
                *other.socket_calls.entry((k.tgid, name)).or_default() += v.calls;
                continue;
            }
            let e = self.collectives_counted.entry((k.tgid, name, k.handle)).or_default();
            e.0 += v.calls;
            e.1 += v.bytes;
        }
        other
    }

    /// A process running collectives that no target set announced
    /// (`attach --all`): it gets its row, name, environment and parent.
    fn processes_of_collectives(&mut self) {
        let new: BTreeSet<u32> = self
            .collectives_counted
            .keys()
            .map(|(pid, _, _)| *pid)
            .filter(|pid| !self.procs.contains_key(pid))
            .collect();
        for pid in new {
            self.discovered(pid);
        }
    }

    /// The kernel's totals are final (the report is built next): the duty
    /// cycle's last interval gets them, if no totals came after it.
    pub fn settle(&mut self) {
        // Exited in the last tick or after it: no tick after counts them.
        let done = std::mem::take(&mut self.credited);
        for pid in done.into_iter().chain(std::mem::take(&mut self.exiting)) {
            self.estimator.exited(pid);
        }
        self.estimator.settle(&sampled_rows(
            &self.collectives_counted,
            &self.copies.counted(),
            &self.io_counted,
        ));
        self.scale_collectives();
        // One transfer record per copy class for the calls beyond its
        // first ones (which have their own), like the collectives' one per
        // communicator.
        let rows: Vec<_> = self
            .copies
            .classes
            .values()
            .filter(|r| r.applied.0 > 0)
            .cloned()
            .collect();
        for r in rows {
            let comm = self.procs.get(&r.first.pid).map(|p| p.comm.clone()).unwrap_or_default();
            let mut t = transfer::of_call(&r.first, &r.call, &comm);
            t.bytes = r.applied.1;
            t.calls = Some(r.applied.0);
            self.transfers.add(t);
        }
        self.window_tick();
    }

    /// The collective rows as every report reads them: counted, plus the
    /// estimate of the time the duty cycle did not count them, and
    /// reflected in the per-process call counts.
    fn scale_collectives(&mut self) {
        self.collectives = self
            .collectives_counted
            .iter()
            .map(|(k, c)| (k.clone(), self.estimator.estimate(k, *c)))
            .collect();
        self.io = self
            .io_counted
            .iter()
            .map(|(k, c)| (k.clone(), self.estimator.estimate(k, *c)))
            .collect();
        let mut per: BTreeMap<ProcOp, u64> = BTreeMap::new();
        for ((pid, name, _), (calls, _)) in self.collectives.iter().chain(&self.io) {
            *per.entry((*pid, name.clone())).or_default() += calls;
        }
        for ((pid, name), calls) in per {
            if let Some(p) = self.procs.get_mut(&pid) {
                p.calls.insert(name, calls);
            }
        }
        self.add_copy_rows();
    }

    /// The sampled rows as counted plus the estimates of the duty cycle's
    /// off phases that closed, never an open one: each figure only grows
    /// (`serve`'s estimated counters).
    pub fn collectives_estimated(&self) -> BTreeMap<RowKey, (u64, u64)> {
        self.collectives_counted
            .iter()
            .map(|(k, c)| (k.clone(), self.estimator.closed(k, *c)))
            .collect()
    }
}
