//! Judging a built report: its verdicts (`judge::verdicts`, the one
//! judging function), the UCX section's paths, the collectives' transports,
//! the transfer groups and staging that follow from them, and the NCCL
//! log's agreement.
use std::collections::BTreeMap;

use super::{Report, accounting};
use crate::{
    classify::{Transport, comm::NcclLog},
    judge::{CollectiveIn, Inputs, ProcessIn},
};

impl Report {
    /// Judges the report once (verdicts, corroborated with an NCCL log when
    /// given; then what follows from them), with the NVLink fact given
    /// (a recording's, on replay), used only where the report's host facts
    /// do not say. Called where reports are built: `Trace::report` and
    /// replay, which then explain it (`crate::explain::fill`, the stage
    /// after this one).
    pub fn judge_with(&mut self, nccl_log: Option<&str>, nvlink: Option<bool>) {
        if self.judged {
            return;
        }
        self.judged = true;
        if self.facts.nvlink.is_none() {
            self.facts.nvlink = nvlink;
        }
        self.judge_verdicts(nccl_log);
        // Collective transfers take their process's verdict.
        let comms: BTreeMap<u32, String> = self.processes.iter().map(|p| (p.pid, p.comm.clone())).collect();
        self.transfers
            .groups
            .retain(|g| g.sample.iter().all(|t| t.calls.is_none()));
        let mut groups: BTreeMap<(String, &'static str), accounting::TransferGroup> = BTreeMap::new();
        let ucx = self
            .ucx
            .as_ref()
            .map(|u| crate::classify::ucx::transfers(u, &comms))
            .unwrap_or_default();
        for t in accounting::collective_transfers(&self.collectives, &comms)
            .into_iter()
            .chain(ucx)
        {
            let g = groups
                .entry((t.op.clone(), t.transport.name()))
                .or_insert_with(|| accounting::TransferGroup {
                    op: t.op.clone(),
                    transport: t.transport.name(),
                    count: 0,
                    bytes: 0,
                    sample: Vec::new(),
                });
            g.count += t.calls.unwrap_or(0);
            g.bytes += t.bytes;
            if g.sample.len() < crate::classify::transfer::SAMPLE_PER_GROUP {
                g.sample.push(t);
            }
        }
        self.transfers.groups.extend(groups.into_values());
        self.transfers.total = self.transfers.groups.iter().map(|g| g.count).sum();
        self.staging = accounting::staging(self);
        self.nccl_log = nccl_log.map(|text| nccl_log_agreement(text, self));
    }

    /// Compares UCX's own log (`UCX_PROTO_INFO=y` / `UCX_LOG_LEVEL=info`
    /// output, `--ucx-log`) with the judged UCX paths: corroboration only,
    /// the paths stay as the evidence decided them. The caller explains the
    /// report again (`crate::explain::fill`): the UCX rules read the log.
    pub fn corroborate_ucx(&mut self, log: &str) {
        let log = crate::classify::ucx_log::corroborate(&mut self.paths, log);
        self.ucx.get_or_insert_with(Default::default).log = Some(log);
    }

    fn judge_verdicts(&mut self, nccl_log: Option<&str>) {
        let mut inputs = inputs_of(self);
        // NCCL's log lists each rank's peers: a communicator's path splits by them.
        if let Some(text) = nccl_log {
            inputs.nccl_peers = crate::classify::comm::LogPeers::of_log(text);
        }
        (self.verdicts, self.paths) = crate::judge::judge(&inputs);
        self.fabric.onto_paths(&mut self.paths);
        // The UCX endpoints take their path's transport; staged bytes of
        // the paths go into the process accounting.
        judge_ucx(self, &inputs);
        if let Some(text) = nccl_log {
            corroborate_verdicts(self, text);
        }
        // Collective bytes take their process's transport; bytes of a
        // host-staged transport count as staged. A `mixed` process (a
        // communicator split by peer group) counts its host-staged
        // communicator paths' bytes instead.
        for c in &mut self.collectives {
            if let Some(v) = self.verdicts.iter().find(|v| v.pid == c.pid) {
                c.transport = v.transport.name();
                if v.host_staged
                    && let Some(p) = self.processes.iter_mut().find(|p| p.pid == c.pid)
                {
                    p.staged_bytes += c.bytes;
                }
            }
        }
        for v in self.verdicts.iter().filter(|v| v.transport == Transport::Mixed) {
            let staged = nccl_staged(&self.paths, v.pid);
            if let Some(p) = self.processes.iter_mut().find(|p| p.pid == v.pid) {
                p.staged_bytes += staged;
            }
        }
    }
}

/// The staged bytes of a process's host-staged NCCL communicator paths.
fn nccl_staged(paths: &[crate::classify::path::Path], pid: u32) -> u64 {
    use crate::classify::path::PeerKind;
    paths
        .iter()
        .filter(|p| p.pid == pid && p.host_staged && p.peer_kind == PeerKind::NcclCommunicator)
        .map(|p| p.staged_bytes)
        .sum()
}

/// The inputs a built report holds.
pub fn inputs_of(r: &Report) -> Inputs {
    Inputs {
        processes: r
            .processes
            .iter()
            .map(|p| ProcessIn::of(p.pid, &p.info, p.churn.as_ref()))
            .collect(),
        collectives: r
            .collectives
            .iter()
            .map(|c| CollectiveIn {
                pid: c.pid,
                op: c.op.clone(),
                communicator: c.communicator.clone(),
                calls: c.calls,
                bytes: c.bytes,
            })
            .collect(),
        gpu_links: r.gpu_links.clone(),
        facts: Some(r.facts.clone()),
        ucx: r.ucx.clone(),
        windows: r.windows.clone(),
        gds: r.gds.clone(),
        nccl_peers: Default::default(),
    }
}

/// The UCX endpoints take the transport of their path, and the staged
/// bytes of the paths the copy classifier did not count (pinned bounce
/// buffers, or sides unknown) go into the process accounting.
fn judge_ucx(r: &mut Report, inputs: &Inputs) {
    use crate::classify::path::{OpClass, PeerKind};
    let pids: Vec<u32> = r.processes.iter().map(|p| p.pid).collect();
    for pid in pids {
        let extra = crate::judge::paths::extra_staged(&r.paths, inputs, pid);
        if let Some(p) = r.processes.iter_mut().find(|p| p.pid == pid) {
            p.staged_bytes += extra;
        }
    }
    let Some(ux) = r.ucx.as_mut() else { return };
    for e in &mut ux.endpoints {
        let op = OpClass::of_op(&e.op);
        if let Some(p) = r.paths.iter().find(|p| {
            p.pid == e.pid
                && p.peer_kind == PeerKind::UcxEndpoint
                && p.peer == e.endpoint
                && p.op == op
                && p.memory == e.memory
        }) {
            e.transport = p.transport;
            e.via = p.via.clone();
        }
    }
}

/// Attaches NCCL's view of each process (its log) to the verdicts, with
/// the processes' environments and the host's RDMA devices for the causes.
pub fn corroborate_verdicts(r: &mut Report, text: &str) {
    use crate::classify::comm;
    for v in &mut r.verdicts {
        v.nccl_log = None;
    }
    let cx = comm::Context {
        env: r.processes.iter().map(|p| (p.pid, p.env.clone())).collect(),
        rdma_devices: Some(r.facts.rdma_devices.clone()),
    };
    comm::corroborate(&mut r.verdicts, &comm::parse_nccl_log(text), &cx);
}

/// Parses channel, communicator and GPUDirect lines and compares each
/// communicator with what the tracer concluded: its paths' transports,
/// else its collectives', else its process's.
pub fn nccl_log_agreement(text: &str, r: &Report) -> NcclLog {
    use crate::classify::{Transport, path::PeerKind};
    crate::classify::comm::nccl_log_against(text, &|pid, comm| {
        let paths: Vec<Transport> = r
            .paths
            .iter()
            .filter(|p| p.pid == pid && p.peer_kind == PeerKind::NcclCommunicator && p.peer == comm)
            .map(|p| p.transport)
            .collect();
        if !paths.is_empty() {
            return paths;
        }
        r.collectives
            .iter()
            .find(|x| x.pid == pid && x.communicator == comm)
            .map(|x| Transport::from_name(x.transport))
            .or_else(|| r.verdicts.iter().find(|v| v.pid == pid).map(|v| v.transport))
            .into_iter()
            .collect()
    })
}
