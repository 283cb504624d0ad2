//! Judging a built report: its verdicts (`judge::verdicts`, the one
//! judging function), the UCX section's paths, the collectives' transports,
//! the transfer groups and staging that follow from them, and the NCCL
//! log's agreement.
use std::collections::BTreeMap;

use super::{Report, accounting};
use crate::{
    classify::{comm::NcclLog, ucx::UcxPath},
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
        let nvlink = self.facts.nvlink;
        crate::classify::ucx_log::corroborate(self.ucx.get_or_insert_with(Default::default), log, nvlink);
    }

    fn judge_verdicts(&mut self, nccl_log: Option<&str>) {
        self.verdicts = crate::judge::verdicts(&inputs_of(self));
        // The UCX section's paths per process and endpoint, by the same
        // decision the UCX processes' verdicts came from.
        judge_ucx(self);
        if let Some(text) = nccl_log {
            crate::classify::comm::corroborate(&mut self.verdicts, &crate::classify::comm::parse_nccl_log(text));
        }
        // Collective bytes take their process's transport; bytes of a
        // host-staged transport count as staged.
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
    }
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
                calls: c.calls,
                bytes: c.bytes,
            })
            .collect(),
        gpu_links: r.gpu_links.clone(),
        facts: Some(r.facts.clone()),
        ucx: r.ucx.clone(),
    }
}

/// Fills the report's UCX section: each process's paths, each endpoint's
/// path, and the staged bytes into the process accounting (the verdicts
/// came from the same decision in `judge::verdicts`).
fn judge_ucx(r: &mut Report) {
    let Some(mut ux) = r.ucx.take() else { return };
    let inputs = inputs_of(r);
    let mut extra = BTreeMap::new();
    let decided: BTreeMap<u32, Vec<UcxPath>> = crate::judge::ucx::judged(&inputs, &ux)
        .map(|(u, _, p)| (u.pid, p))
        .collect();
    for u in &mut ux.processes {
        u.paths = decided.get(&u.pid).cloned().unwrap_or_default();
        let staged: u64 = u
            .paths
            .iter()
            .filter(|p| p.host_staged)
            .map(|p| p.staged_bytes.saturating_sub(u.copies.already_staged_bytes))
            .sum();
        extra.insert(u.pid, staged);
    }
    for e in &mut ux.endpoints {
        let Some(u) = ux.processes.iter().find(|u| u.pid == e.pid) else {
            continue;
        };
        let path = u
            .paths
            .iter()
            .find(|p| p.memory == e.memory)
            .or_else(|| u.paths.first().filter(|_| e.memory == "unknown"));
        if let Some(p) = path {
            e.transport = p.transport;
            e.path = p.path.clone();
        }
    }
    // Host-staged GPU data: the copies the copy classifier did not count
    // (pinned bounce buffers, or sides unknown) are staged bytes too.
    for p in &mut r.processes {
        p.staged_bytes += extra.get(&p.pid).copied().unwrap_or(0);
    }
    r.ucx = Some(ux);
}

/// Parses channel, communicator and GPUDirect lines and compares each
/// communicator with what the tracer concluded.
pub fn nccl_log_agreement(text: &str, r: &Report) -> NcclLog {
    crate::classify::comm::nccl_log_against(text, &|pid, comm| {
        r.collectives
            .iter()
            .find(|x| x.pid == pid && x.communicator == comm)
            .map(|x| x.transport)
            .or_else(|| r.verdicts.iter().find(|v| v.pid == pid).map(|v| v.transport.name()))
    })
}
