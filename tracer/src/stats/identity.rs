//! Who a process's NCCL communicators are when their set-up was not
//! traced: NCCL's RAS answer mapped onto them (`Input::NcclRas`), and the
//! process's TCP connections, read once (`Fact::Connections`).
use super::{Aggregator, Communicator, feed::Input, source::Fact};
use crate::{
    identity::{
        IdSource, RasQuery,
        ras::{self, Mapping, NcclRas, RasAnswer},
    },
    probes::uapi::Kind,
};

/// Whether an op of the kernel's rows is an NCCL call on a communicator.
fn on_communicator(op: &str) -> bool {
    crate::probes::ops::op_code(op)
        .and_then(crate::probes::uapi::row_of)
        .is_some_and(|(_, r)| matches!(r.kind, Kind::Collective | Kind::PointToPoint))
}

impl Aggregator {
    /// The communicators (pid, handle) that made NCCL calls and have no
    /// identity: their init was not traced, or its id not read.
    pub fn unidentified(&self) -> Vec<(u32, u64)> {
        let out: std::collections::BTreeSet<(u32, u64)> = self
            .collectives_counted
            .keys()
            .filter(|(pid, op, handle)| {
                *handle != 0
                    && on_communicator(op)
                    && self
                        .communicator(*pid, *handle)
                        .and_then(|c| c.comm_id.as_ref())
                        .is_none()
            })
            .map(|(pid, _, handle)| (*pid, *handle))
            .collect();
        out.into_iter().collect()
    }

    /// Reads the TCP connections of each process with a communicator
    /// without identity, once (the kernel's rows name it first).
    pub(super) fn read_connections(&mut self) {
        let mut pids: Vec<u32> = self.unidentified().into_iter().map(|(pid, _)| pid).collect();
        pids.dedup();
        for pid in pids {
            if self.procs.get(&pid).is_none_or(|p| p.connections_read) {
                continue;
            }
            let connections = self.source.connections(pid);
            self.note(Fact::Connections {
                pid,
                connections: connections.clone(),
            });
            if let Some(p) = self.procs.get_mut(&pid) {
                p.connections = connections;
                p.connections_read = true;
            }
        }
    }

    /// NCCL's RAS answer: each communicator without identity that it names
    /// gets its hash, rank and rank count (`identity::ras::map`).
    pub fn nccl_ras(&mut self, q: RasQuery) {
        self.observe(|| Input::NcclRas(Box::new(q.clone())));
        let matches = match &q.answer {
            RasAnswer::Status(s) => {
                let mut locals: Vec<ras::Local> = Vec::new();
                for (pid, handle) in self.unidentified() {
                    let calls = self
                        .collectives_counted
                        .iter()
                        .filter(|((p, _, h), _)| *p == pid && *h == handle)
                        .map(|((_, op, _), (calls, _))| (ras::function_of(op).to_string(), *calls))
                        .collect();
                    locals.push(ras::Local {
                        pid,
                        ns_pid: q.ns_pids.get(&pid).copied().unwrap_or(pid),
                        communicator: format!("{handle:#x}"),
                        calls,
                    });
                }
                ras::map(s, &locals)
            }
            RasAnswer::Error(_) => Vec::new(),
        };
        for m in &matches {
            if let Mapping::Matched { comm_id, rank, nranks } = &m.mapping
                && let Some(p) = self.procs.get_mut(&m.pid)
            {
                p.communicators.push(Communicator {
                    communicator: m.communicator.clone(),
                    comm_id: Some(comm_id.clone()),
                    comm_id_source: Some(IdSource::NcclRas),
                    rank: Some(*rank),
                    nranks: Some(*nranks),
                    ..Default::default()
                });
            }
        }
        self.nccl_ras = Some(NcclRas { query: q, matches });
    }

    /// The last RAS answer and what it told.
    pub fn nccl_ras_answer(&self) -> Option<&NcclRas> {
        self.nccl_ras.as_ref()
    }
}
