//! UCX processes judged: each process's paths from its UCX evidence and
//! the judging inputs (`classify::ucx::paths`), and its verdict where it is
//! not an NCCL rank.
use super::{Inputs, ProcessIn};
use crate::classify::{
    comm,
    ucx::{Context, UcxPath, UcxProcess, UcxReport, paths, verdict_of},
};

/// The context of one process, from the judging inputs (a report's, or
/// the live aggregator's).
fn context_of(i: &Inputs, p: &ProcessIn, ux: &UcxReport) -> Context {
    let by = |k: &str| {
        p.churn
            .as_ref()
            .and_then(|c| c.by_backing.get(k))
            .map_or(0, |b| b.registrations)
    };
    Context {
        calls: p.calls.clone(),
        env: p.env.clone(),
        socket_bytes: p.socket.bytes_sent + p.socket.bytes_received,
        gpu_mrs: by("gpu/peer-mem"),
        dmabuf_mrs: by("gpu/dma-buf"),
        host_mrs: by("host"),
        nvlink: i.facts.as_ref().and_then(|f| f.nvlink),
        gpus: i.facts.as_ref().map(|f| f.gpus).filter(|n| *n > 0),
        links: i.gpu_links.clone(),
        memories: ux
            .endpoints
            .iter()
            .filter(|e| e.pid == p.pid && (e.bytes > 0 || e.calls > 0))
            .map(|e| e.memory.clone())
            .collect(),
    }
}

/// Each UCX process's paths, with its context (None: not in the inputs).
pub fn judged<'a>(
    i: &'a Inputs,
    ux: &'a UcxReport,
) -> impl Iterator<Item = (&'a UcxProcess, Context, Vec<UcxPath>)> + 'a {
    ux.processes.iter().filter_map(move |u| {
        let p = i.processes.iter().find(|p| p.pid == u.pid)?;
        let cx = context_of(i, p, ux);
        let paths = paths(u, &cx);
        Some((u, cx, paths))
    })
}

/// The UCX processes' verdicts, in the judging function (`judge::verdicts`):
/// a UCX process that is not an NCCL rank takes its UCX verdict, since the
/// IPC handles and copies NCCL's rules read mean something else there.
pub fn verdicts(i: &Inputs, out: &mut Vec<comm::Verdict>) {
    let Some(ux) = &i.ucx else { return };
    for (u, cx, paths) in judged(i, ux) {
        if cx.nccl() {
            continue;
        }
        let Some(v) = verdict_of(u, &paths) else { continue };
        match out.iter().position(|x| x.pid == v.pid) {
            Some(k) => out[k] = v,
            None => out.push(v),
        }
    }
    let order: Vec<u32> = i.processes.iter().map(|p| p.pid).collect();
    out.sort_by_key(|v| order.iter().position(|p| *p == v.pid).unwrap_or(usize::MAX));
}

/// Bytes of a UCX process's staging that the copy classifier did not count
/// as staged (pinned bounce buffers, or sides unknown).
pub fn extra_staged(i: &Inputs, pid: u32) -> u64 {
    let Some(ux) = &i.ucx else { return 0 };
    judged(i, ux)
        .filter(|(u, _, _)| u.pid == pid)
        .map(|(u, _, paths)| {
            paths
                .iter()
                .filter(|p| p.host_staged)
                .map(|p| p.staged_bytes.saturating_sub(u.copies.already_staged_bytes))
                .sum::<u64>()
        })
        .sum()
}
