//! One classified call into every figure it adds to, step by step: the
//! registry and the verdict, what it tells of the process's set-up
//! (communicators), its registration latency, its transfer records, its
//! operation's row and the process's figures (pages pinned, and those
//! pinned inside a registration); and the copies counted in the kernel,
//! class by class.
use tracer_common::{Event, kind};

use super::{Aggregator, OpKey, OpStats, ThreadKey, comm_of, new_histogram};
use crate::{
    classify::{self, Transport, transfer},
    probes::uapi::{self, Kind},
};

/// Pin-family calls one thread keeps unattributed, oldest dropped first.
const PENDING_PINS: usize = 4096;

/// The row of `c`'s (label, verdict), made on its first call.
fn op_row<'a>(ops: &'a mut std::collections::BTreeMap<OpKey, OpStats>, c: &classify::Call) -> &'a mut OpStats {
    ops.entry(OpKey::new(&c.label, c.transport)).or_insert_with(|| OpStats {
        family: c.family,
        calls: 0,
        errors: 0,
        bytes: 0,
        pages: 0,
        hist: new_histogram(),
        evidence: c.evidence.clone(),
    })
}

impl Aggregator {
    /// Adds the copies counted (or estimated) since the last time, per
    /// class, to every figure a copy event adds to, with the verdict of the
    /// class's first calls (or takes back what an estimate lost); their
    /// transfer record is one per class (`settle`).
    pub(super) fn add_copy_rows(&mut self) {
        let estimator = &self.estimator;
        for (key, calls, bytes) in self.copies.due(|k, c| estimator.estimate(k, c)) {
            let Some(class) = self.copies.classes.get(&key) else {
                continue;
            };
            let (e, c) = (class.first, class.call.clone());
            let add = |v: &mut u64, d: i64| *v = v.saturating_add_signed(d);
            self.ucx.observe_many(&e, c.transport, &self.registry, calls, bytes);
            let s = op_row(&mut self.ops, &c);
            add(&mut s.calls, calls);
            add(&mut s.bytes, bytes);
            let p = self.procs.entry(e.pid).or_default();
            add(&mut p.moved_bytes, bytes);
            if c.transport == Transport::HostStaged {
                add(&mut p.staging_copies, calls);
            }
            add(p.transports.entry(c.transport.name()).or_default(), calls);
            if c.transport.staged() {
                add(&mut p.staged_bytes, bytes);
            }
            add(p.calls.entry(c.label).or_default(), calls);
        }
    }

    /// A call record: classified and added to every figure; returns its
    /// classification (None for an aggregated row's sample or an
    /// undecoded call).
    pub(super) fn call(&mut self, e: &Event) -> Option<classify::Call> {
        let row = uapi::row_of(e.op).map(|(_, r)| r);
        let kind_is = |k: Kind| row.is_some_and(|r| r.kind == k);
        let (c, registered) = self.classified(e)?;
        let classified = c.clone();
        self.ucx.observe(e, c.transport, &self.registry);
        if kind_is(Kind::HostRegister) && !c.failed {
            self.gds.host_register(e.pid, c.bytes);
        }
        self.cufile_call(e);
        self.set_up(e, &c, kind_is(Kind::CommInit), kind_is(Kind::CommEnd));
        if registered {
            self.registration_latency(e, &c);
        }
        self.transfer_records(e, &c, kind_is(Kind::Copy));
        let s = op_row(&mut self.ops, &c);
        s.calls += 1;
        s.errors += c.failed as u64;
        s.bytes += c.bytes;
        s.pages += c.pages;
        // Entry-only records have no duration.
        if e.kind == kind::CALL {
            let _ = s.hist.record(e.dur_ns.max(1));
        }
        self.read_env(e.pid);
        self.process_figures(e, c, registered);
        if e.op == tracer_common::op::IB_UMEM_GET {
            self.pins_inside_registration(e);
        }
        Some(classified)
    }

    /// The call seen by the registry and classified; with whether it was a
    /// registration. None for the first call of an aggregated row (a
    /// sample of its arguments: the kernel counts the calls) and for a call
    /// the tracer cannot interpret (counted as undecoded).
    fn classified(&mut self, e: &Event) -> Option<(classify::Call, bool)> {
        // A process first seen by its calls (attach --all) was running before.
        if !self.procs.contains_key(&e.pid) {
            self.discovered(e.pid);
        }
        // The first call of an aggregated row: a sample of its arguments,
        // not a call (the kernel counts those).
        if let Some((_, r)) = uapi::row_of(e.op).filter(|(_, r)| e.kind == kind::ENTRY && r.aggregate) {
            if r.lib == uapi::Lib::Cufile {
                self.cufile_process(e.pid);
                self.gds.sample(e, &self.registry);
            } else {
                self.ucx.sample(e, &self.registry);
            }
            return None;
        }
        if self.registry.nvlink.is_none() && uapi::row_of(e.op).is_some_and(|(_, r)| r.kind == Kind::Copy) {
            self.registry.nvlink = Some(self.source.nvlink());
        }
        let regs_before = self.registry.procs.get(&e.pid).map_or(0, |p| p.churn.registrations);
        self.registry.observe(e);
        let row = uapi::row_of(e.op).map(|(_, r)| r);
        let Some(c) = classify::call(e, &self.registry) else {
            self.undecoded += 1;
            if let Some(t) = &mut self.timeline {
                t.call(e, None, false, 0);
            }
            return None;
        };
        // A registration: one the registry counted (MRs, io_uring buffer
        // sets), or pinned host memory registered with CUDA.
        let registered = self.registry.procs.get(&e.pid).map_or(0, |p| p.churn.registrations) > regs_before
            || (row.is_some_and(|r| r.kind == Kind::HostRegister) && !c.failed);
        Some((c, registered))
    }

    /// What a communicator's set-up and end tell: its rank count, its
    /// identity, and where the duty cycle's estimates of its calls stop.
    fn set_up(&mut self, e: &Event, c: &classify::Call, comm_init: bool, comm_end: bool) {
        // ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
        // (and ...Config(..., config)), ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist):
        // the communicators' rank count in the second register.
        if comm_init && !c.failed {
            let p = self.procs.entry(e.pid).or_default();
            p.nccl_ranks.push(e.args[1] as u32);
        }
        // ncclResult_t ncclCommDestroy(ncclComm_t comm) (and ncclCommAbort):
        // the communicator's calls ended here (the duty cycle's estimates).
        if comm_end && !c.failed {
            self.estimator.row_ended(e.pid, e.args[0]);
        }
        if let Some((_, row)) = uapi::row_of(e.op)
            && row.kind == Kind::CommInit
            && e.kind == kind::CALL
            && !c.failed
        {
            let p = self.procs.entry(e.pid).or_default();
            p.communicators.push(super::Communicator::of_init(e, row));
        }
    }

    /// A registration's latency, per what backs the memory.
    fn registration_latency(&mut self, e: &Event, c: &classify::Call) {
        let backing = match c.transport {
            Transport::GdrDmabuf => "gpu/dma-buf",
            Transport::GdrPeerMem => "gpu/peer-mem",
            _ if e.op == tracer_common::op::IO_URING_REGISTER => "io_uring",
            _ => "host",
        };
        let _ = self
            .reg_latency
            .entry(backing)
            .or_insert_with(new_histogram)
            .record(e.dur_ns.max(1));
    }

    /// The call on the timeline, and its transfer record; a copy's bytes
    /// moved, and the staged transfer a D2H+H2D pair through one host
    /// buffer makes.
    fn transfer_records(&mut self, e: &Event, c: &classify::Call, copy: bool) {
        let is_transfer = transfer::is_transfer(e, c);
        if let Some(t) = &mut self.timeline {
            t.call(e, Some(c), is_transfer, if copy && !c.failed { c.bytes } else { 0 });
        }
        if !is_transfer {
            return;
        }
        let comm = self.procs.get(&e.pid).map_or_else(|| comm_of(e), |p| p.comm.clone());
        let comm = if comm.is_empty() { comm_of(e) } else { comm };
        self.transfers.add(transfer::of_call(e, c, &comm));
        if copy && !c.failed {
            let pair = self.pairs.copy(e, c, &self.registry, &comm);
            let p = self.procs.entry(e.pid).or_default();
            p.moved_bytes += c.bytes;
            if c.transport == Transport::HostStaged {
                p.staging_copies += 1;
            }
            if let Some(pair) = pair {
                if let Some(t) = &mut self.timeline {
                    t.staged_pair(pair.bytes);
                }
                p.staged_pairs += 1;
                if c.transport != Transport::HostStaged {
                    p.staging_copies += 1;
                    p.staged_bytes += pair.bytes;
                }
                self.transfers.add(pair);
            }
        }
    }

    /// The process's figures: its name, calls per verdict and label,
    /// errors, staged bytes, registrations, and pages pinned (kept as
    /// pending until an enclosing registration claims them) or unpinned.
    fn process_figures(&mut self, e: &Event, c: classify::Call, registered: bool) {
        let p = self.procs.entry(e.pid).or_default();
        if p.comm.is_empty() {
            p.comm = comm_of(e);
        }
        *p.transports.entry(c.transport.name()).or_default() += 1;
        if c.transport.staged() {
            p.staged_bytes += c.bytes;
        }
        if registered {
            p.registrations += 1;
        }
        *p.calls.entry(c.label).or_default() += 1;
        p.errors += c.failed as u64;
        if c.pages > 0 {
            p.pages_pinned += c.pages as u64;
            let pending = self.pending_pins.entry(ThreadKey::of(e)).or_default();
            if pending.len() >= PENDING_PINS {
                pending.remove(0);
            }
            pending.push((e.start_ns, e.start_ns + e.dur_ns, c.pages as u64));
        } else {
            p.pages_unpinned += (-c.pages) as u64;
        }
    }

    /// The pages pinned by pin-family calls nested inside this
    /// `ib_umem_get` (inner calls return, and arrive, first).
    fn pins_inside_registration(&mut self, e: &Event) {
        let (start, end) = (e.start_ns, e.start_ns + e.dur_ns);
        let pending = self.pending_pins.entry(ThreadKey::of(e)).or_default();
        let inside: u64 = pending
            .iter()
            .filter(|(s, f, _)| *s >= start && *f <= end)
            .map(|x| x.2)
            .sum();
        pending.retain(|(s, f, _)| !(*s >= start && *f <= end));
        if let Some(p) = self.procs.get_mut(&e.pid) {
            p.pages_pinned_by_registration += inside;
        }
    }
}
