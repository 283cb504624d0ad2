//! Every process's paths, judged from where their bytes went, and each
//! process's verdict as their summary (docs/paths.md).
//!
//! The candidates are a process's path rows: UCX data calls per endpoint,
//! operation class and memory; NCCL calls per communicator; and, for a
//! process that moved GPU data with no call of its own, the requests it
//! served. Each path gets the evidence windows (`stats/windows.rs`) it
//! carried alone; what moved while several of a process's paths ran is
//! shared, and keeps a path from being called direct. A report without
//! windows (written before them) gives every path its process's evidence
//! when it has one path, else shares it among them.
use std::collections::{BTreeMap, BTreeSet};

use super::{Inputs, ProcessIn};
use crate::{
    classify::{
        Transport,
        comm::{self, Verdict},
        path::{OpClass, Path, PeerKind, Share},
        ucx::{self, Context, Copies, UcxProcess, UcxReport},
    },
    stats::windows::{Window, row_key},
};

/// A path carries a process's data when it moved at least this share of
/// its path bytes: smaller ones (notifications, wire-up) are listed but do
/// not make a process `mixed`.
const SIGNIFICANT: f64 = 0.01;
/// A process served its peers when GPU or socket bytes of at least this
/// much moved with no call of its own.
const SERVED_MIN: u64 = 1 << 20;
/// Sampled copies whose estimate is at most this many times the socket
/// bytes of the same windows are taken for the socket's bytes: a staged
/// transfer copied to host memory and sent from it (docs/paths.md).
const SAME_BYTES: f64 = 2.0;

/// Evidence of one path: what its windows hold.
#[derive(Clone, Debug, Default)]
struct Evidence {
    host_copy: u64,
    device_copy: u64,
    unknown_copy: u64,
    socket: u64,
    /// Host bytes (copies to or from host, sockets) of windows it shared.
    shared_host: u64,
    /// Windows it carried alone (or shared): none means its calls always
    /// ran beside a larger path's, too small to judge apart.
    carried: u64,
    /// The copies are the duty cycle's estimates (the process was sampled).
    copies_estimated: bool,
}

impl Evidence {
    fn add(&mut self, w: &Window) {
        self.carried += 1;
        self.host_copy += w.host_copy_bytes;
        self.device_copy += w.device_copy_bytes;
        self.unknown_copy += w.unknown_copy_bytes;
        self.socket += w.socket_bytes;
    }

    /// Bytes that went through host memory, each counted once: a staged
    /// transfer is copied to host memory and sent from it. Where the
    /// copies were estimated and the socket (always counted) carried the
    /// same bytes, the socket's count is the figure: a measurement of them,
    /// where the estimate is off by what sampling misses.
    fn host(&self) -> u64 {
        if self.socket_counts(self.host_copy) {
            return self.socket;
        }
        self.host_copy.max(self.socket)
    }

    /// Bytes moved, by copies of any kind or the socket, counted once (the
    /// socket's count, as in [`Evidence::host`], where the copies are
    /// estimates of the same bytes).
    fn moved(&self) -> u64 {
        let copies = self.host_copy + self.device_copy + self.unknown_copy;
        if self.socket_counts(copies) {
            return self.socket;
        }
        copies.max(self.socket)
    }

    /// Whether `copies`, estimated, are taken for the socket's bytes.
    fn socket_counts(&self, copies: u64) -> bool {
        self.copies_estimated && self.socket > 0 && copies as f64 <= SAME_BYTES * self.socket as f64
    }
}

/// One candidate path: its rows (`op@handle`) and figures.
struct Candidate {
    path: Path,
    rows: BTreeSet<String>,
}

/// The evidence of each candidate of one process, from its windows.
fn evidence(cands: &[Candidate], windows: &[&Window], fallback: Option<&Evidence>) -> Vec<Evidence> {
    let blank = Evidence {
        copies_estimated: fallback.is_some_and(|f| f.copies_estimated),
        ..Evidence::default()
    };
    let mut out = vec![blank.clone(); cands.len()];
    if windows.is_empty() {
        // No windows (an older report): one path takes it all; several share it.
        if let Some(f) = fallback {
            if cands.len() == 1 {
                out[0] = f.clone();
            } else {
                for e in &mut out {
                    e.shared_host = f.host();
                }
            }
        }
        return out;
    }
    for w in windows.iter().filter(|w| !w.paths.is_empty()) {
        let carriers: Vec<usize> = cands
            .iter()
            .enumerate()
            .filter(|(_, c)| w.paths.iter().any(|k| c.rows.contains(k)))
            .map(|(i, _)| i)
            .collect();
        match carriers.as_slice() {
            [one] => out[*one].add(w),
            many => {
                let mut e = blank.clone();
                e.add(w);
                for i in many {
                    out[*i].shared_host += e.host();
                    out[*i].carried += 1;
                }
            }
        }
    }
    out
}

/// The UCX context of a process (its calls, environment, MRs, host facts).
fn ucx_context(i: &Inputs, p: &ProcessIn, ux: &UcxReport) -> Context {
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
        op: None,
        shared_host_bytes: 0,
    }
}

/// The UCX paths of one process: one per (endpoint, class, memory), and
/// the requests it served with no call of its own.
fn ucx_paths(i: &Inputs, p: &ProcessIn, u: &UcxProcess, ux: &UcxReport, windows: &[&Window]) -> Vec<Path> {
    let mut cands: BTreeMap<(String, OpClass, String), Candidate> = BTreeMap::new();
    for e in ux.endpoints.iter().filter(|e| e.pid == p.pid) {
        let op = OpClass::of_op(&e.op);
        let key = (e.endpoint.clone(), op, e.memory.clone());
        let c = cands.entry(key).or_insert_with(|| Candidate {
            path: Path::new(p.pid, PeerKind::UcxEndpoint, e.endpoint.clone(), op, &e.memory),
            rows: BTreeSet::new(),
        });
        c.path.calls += e.calls;
        c.path.bytes += e.bytes;
        let handle = u64::from_str_radix(e.endpoint.trim_start_matches("0x"), 16).unwrap_or(0);
        c.rows.insert(row_key(&e.op, handle));
    }
    let cands: Vec<Candidate> = cands.into_values().collect();
    let copies_estimated = !p.collectives_sampled.is_exact();
    let whole = Evidence {
        host_copy: u.copies.gpu_host_bytes,
        device_copy: u.copies.gpu_gpu_bytes,
        unknown_copy: u.copies.unknown_bytes,
        socket: p.socket.bytes_sent + p.socket.bytes_received,
        shared_host: 0,
        carried: 1,
        copies_estimated,
    };
    let ev = evidence(&cands, windows, Some(&whole));
    let base = ucx_context(i, p, ux);
    let mut out = Vec::new();
    for (c, e) in cands.iter().zip(&ev) {
        if !windows.is_empty() && e.carried == 0 {
            let mut path = c.path.clone();
            path.mark_beside();
            out.push(path);
            continue;
        }
        out.push(judge_ucx(u, &base, &c.path, e));
    }
    // What moved with no call of the process's own: requests it served.
    let served = if windows.is_empty() {
        (u.data_calls + u.receives == 0).then_some(whole)
    } else {
        windows
            .iter()
            .filter(|w| w.paths.is_empty())
            .fold(None, |acc: Option<Evidence>, w| {
                let mut e = acc.unwrap_or(Evidence {
                    copies_estimated,
                    ..Evidence::default()
                });
                e.add(w);
                Some(e)
            })
    };
    if let Some(e) = served.filter(|e| e.host_copy + e.device_copy + e.unknown_copy + e.socket >= SERVED_MIN) {
        let gpu = e.host_copy + e.device_copy + e.unknown_copy > 0;
        let memory = if gpu { "cuda" } else { "host" };
        // Traced from its start, a process with no data call of its own
        // served its peers. Attached later, it served them if its peers'
        // calls were seen while none of its own were (the probes of both
        // were live alike); else its calls may just not have been seen,
        // and the class is not known.
        let peers_seen = ux.processes.iter().any(|q| q.pid != p.pid && q.data_calls > 0);
        let (op, why) = if u.traced_from_start || u.data_calls + u.receives > 0 {
            (
                OpClass::Served,
                "no UCX data call of its own moved these bytes: its worker served its peers' requests (the target of their GETs or PUTs)",
            )
        } else if peers_seen {
            (
                OpClass::Served,
                "no UCX data call of its own was seen while its peers' calls were: its worker served their requests (the target of their GETs or PUTs), inferred from the traced window",
            )
        } else {
            (
                OpClass::Other,
                "no UCX data call was seen (attached after set-up, or its calls not counted yet): the bytes the process moved while mapping UCX are judged as one path, its class unknown",
            )
        };
        let mut path = Path::new(p.pid, PeerKind::Remote, "peers".into(), op, memory);
        path.bytes = e.moved();
        let mut p2 = judge_ucx(u, &base, &path, &e);
        p2.evidence.insert(0, why.into());
        if !u.traced_from_start {
            p2.basis = comm::Basis::SteadyState;
        }
        out.push(p2);
    }
    out
}

/// One UCX path decided from its own evidence, by the UCX rules
/// (`classify::ucx::paths`) on a view of the process restricted to it.
fn judge_ucx(u: &UcxProcess, base: &Context, cand: &Path, e: &Evidence) -> Path {
    let mut view = u.clone();
    view.copies = Copies {
        calls: u.copies.calls,
        gpu_host_bytes: e.host_copy,
        gpu_gpu_bytes: e.device_copy,
        unknown_bytes: e.unknown_copy,
        already_staged_bytes: u.copies.already_staged_bytes.min(e.host_copy),
    };
    view.data_calls = cand.calls;
    view.data_bytes = cand.bytes;
    let mut cx = base.clone();
    cx.socket_bytes = e.socket;
    cx.memories = [cand.memory.clone()].into();
    cx.op = Some(cand.op);
    cx.shared_host_bytes = e.shared_host;
    let mut p = ucx::paths(&view, &cx)
        .into_iter()
        .next()
        .unwrap_or_else(|| cand.clone());
    p.peer_kind = cand.peer_kind;
    p.peer = cand.peer.clone();
    p.op = cand.op;
    p.memory = cand.memory.clone();
    p.calls = cand.calls;
    p.bytes = cand.bytes;
    p.host_bytes = e.host();
    p.device_bytes = e.device_copy;
    p.shared_host_bytes = e.shared_host;
    p
}

/// NCCL paths: one per communicator the process ran calls on, with its
/// verdict's transport, unless host-memory bytes moved in the
/// communicator's own time and the verdict calls it direct.
fn nccl_paths(i: &Inputs, p: &ProcessIn, v: Option<&Verdict>, windows: &[&Window]) -> Vec<Path> {
    let mut cands: BTreeMap<(String, OpClass), Candidate> = BTreeMap::new();
    for c in i.collectives.iter().filter(|c| c.pid == p.pid && c.calls > 0) {
        let op = match OpClass::of_op(&c.op) {
            OpClass::PointToPoint => OpClass::PointToPoint,
            OpClass::Collective => OpClass::Collective,
            _ => continue,
        };
        let key = (c.communicator.clone(), op);
        let cand = cands.entry(key).or_insert_with(|| Candidate {
            path: Path::new(p.pid, PeerKind::NcclCommunicator, c.communicator.clone(), op, "cuda"),
            rows: BTreeSet::new(),
        });
        cand.path.calls += c.calls;
        cand.path.bytes += c.bytes;
        let handle = u64::from_str_radix(c.communicator.trim_start_matches("0x"), 16).unwrap_or(0);
        cand.rows.insert(row_key(&c.op, handle));
    }
    let cands: Vec<Candidate> = cands.into_values().collect();
    let whole = Evidence {
        socket: p.socket.bytes_sent + p.socket.bytes_received,
        copies_estimated: !p.collectives_sampled.is_exact(),
        ..Evidence::default()
    };
    let ev = evidence(&cands, windows, Some(&whole));
    let paths = cands
        .into_iter()
        .zip(ev)
        .map(|(c, e)| {
            let mut path = c.path;
            path.comm = p.comm.clone();
            path.host_bytes = e.host();
            path.device_bytes = e.device_copy;
            path.shared_host_bytes = e.shared_host;
            match v {
                Some(v) => {
                    path.transport = v.transport;
                    path.via = nccl_via(v);
                    path.host_staged = v.host_staged;
                    path.staged_bytes = if v.host_staged { path.bytes } else { 0 };
                    path.basis = v.basis;
                    path.evidence = v.evidence.clone();
                    path.cause = v.cause.clone();
                }
                None => path.evidence.push("no verdict for the process: its set-up was not seen and its steady state does not decide".into()),
            }
            let host = e.host();
            if path.direct() && host as f64 >= super::peers::HOST_CONTRADICTS * path.bytes.max(1) as f64 {
                path.evidence.push(format!(
                    "but {host} bytes went through host memory (sockets, host copies) while this communicator's calls ran: its bytes did not all stay in GPU memory"
                ));
                path.transport = Transport::Ambiguous;
            }
            path
        })
        .collect();
    super::peers::by_peer_group(i, p, v, paths)
}

/// File paths (cuFile): one per file, direction and memory, judged from
/// their windows (`judge/files.rs`).
fn file_paths(i: &Inputs, p: &ProcessIn, windows: &[&Window]) -> Vec<Path> {
    super::files::paths(i, p, windows)
}

/// NCCL's name of a verdict's transport (`P2P`, `SHM`, `NET/Socket`...).
fn nccl_via(v: &Verdict) -> String {
    if let Some(n) = v.net {
        return n.name().to_string();
    }
    match v.transport {
        Transport::P2pNvlink | Transport::P2pPcie | Transport::IpcSameDevice => "P2P".into(),
        Transport::Shm => "SHM".into(),
        Transport::Socket => "NET/Socket".into(),
        t => t.name().into(),
    }
}

/// Every process's paths, and its verdict made their summary: a process
/// whose significant paths share one transport keeps (or gets) it, one
/// whose paths differ is `mixed` with each one's share.
pub fn judge(i: &Inputs, verdicts: &mut Vec<Verdict>) -> Vec<Path> {
    let mut all = Vec::new();
    let empty = UcxReport::default();
    let ux = i.ucx.as_ref().unwrap_or(&empty);
    for p in &i.processes {
        let windows: Vec<&Window> = i.windows.iter().filter(|w| w.pid == p.pid).collect();
        let u = ux.processes.iter().find(|u| u.pid == p.pid);
        let nccl = p.calls.keys().any(|k| comm::is_nccl(k));
        let mut paths = if let Some(u) = u.filter(|_| !nccl) {
            ucx_paths(i, p, u, ux, &windows)
        } else {
            nccl_paths(i, p, verdicts.iter().find(|v| v.pid == p.pid), &windows)
        };
        paths.extend(file_paths(i, p, &windows));
        for x in &mut paths {
            x.comm = p.comm.clone();
        }
        if paths.is_empty() {
            // NCCL's set-up rules mean nothing for a UCX process: without a
            // path of its own it has no verdict.
            if u.is_some() && !nccl {
                verdicts.retain(|v| v.pid != p.pid);
            }
            continue;
        }
        let first = u.filter(|_| !nccl).map(ucx::summary_line);
        summarize(p, &paths, first, verdicts);
        all.extend(paths);
    }
    let order: Vec<u32> = i.processes.iter().map(|p| p.pid).collect();
    verdicts.sort_by_key(|v| order.iter().position(|p| *p == v.pid).unwrap_or(usize::MAX));
    all
}

/// The process's verdict from its paths (replacing a UCX verdict, or an
/// NCCL one whose path the bytes contradicted).
fn summarize(p: &ProcessIn, paths: &[Path], first: Option<String>, verdicts: &mut Vec<Verdict>) {
    let total: u64 = paths.iter().map(|x| x.bytes).sum();
    let significant: Vec<&Path> = paths
        .iter()
        .filter(|x| total == 0 || x.bytes as f64 >= SIGNIFICANT * total as f64)
        .collect();
    // A path undecided beside a larger one shares that path's windows (any
    // host bytes in them count against it): it took no transport of its
    // own and splits no verdict, unless every path is such.
    let own = |x: &&Path| !x.undecided_beside();
    let significant: Vec<&Path> = if significant.iter().any(own) {
        significant.into_iter().filter(own).collect()
    } else {
        significant
    };
    let transports: BTreeSet<Transport> = significant.iter().map(|x| x.transport).collect();
    let lead = significant
        .iter()
        .max_by_key(|x| (x.memory == "cuda", x.bytes))
        .copied()
        .unwrap_or(&paths[0]);
    let existing = verdicts.iter().position(|v| v.pid == p.pid);
    let transport = if transports.len() > 1 {
        Transport::Mixed
    } else {
        lead.transport
    };
    // An NCCL verdict stands where its paths agree with it.
    if let Some(k) = existing
        && first.is_none()
        && verdicts[k].transport == transport
    {
        return;
    }
    let mut evidence: Vec<String> = first.into_iter().collect();
    if transport == Transport::Mixed {
        evidence.push(format!(
            "{} paths took different transports: {}",
            significant.len(),
            significant
                .iter()
                .map(|x| format!(
                    "{} {} via {} ({:.0}% of the bytes)",
                    x.op.name(),
                    x.transport.name(),
                    x.via,
                    x.bytes as f64 * 100.0 / total.max(1) as f64
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    } else {
        evidence.push(format!("{} memory via {}", lead.memory, lead.via));
        evidence.extend(lead.evidence.iter().cloned());
    }
    let shares = (transport == Transport::Mixed).then(|| {
        significant
            .iter()
            .map(|x| Share {
                op: x.op,
                peer: x.peer.clone(),
                transport: x.transport,
                share: x.bytes as f64 / total.max(1) as f64,
            })
            .collect()
    });
    let old = existing.map(|k| verdicts[k].clone());
    let v = Verdict {
        pid: p.pid,
        comm: p.comm.clone(),
        transport,
        host_staged: significant.iter().any(|x| x.host_staged),
        basis: lead.basis,
        evidence,
        cause: significant.iter().find_map(|x| x.cause.clone()),
        cause_kind: old
            .as_ref()
            .and_then(|o| o.cause_kind)
            .filter(|_| transport != Transport::Mixed),
        nccl_log: old.as_ref().and_then(|o| o.nccl_log.clone()),
        net: old.as_ref().and_then(|o| o.net),
        other_hosts: old.as_ref().and_then(|o| o.other_hosts.clone()),
        paths: shares.unwrap_or_default(),
    };
    match existing {
        Some(k) => verdicts[k] = v,
        None => verdicts.push(v),
    }
}

/// Bytes of a process's staged paths beyond what the copy classifier
/// already counted as staged (pinned bounce buffers, or sides unknown).
pub fn extra_staged(paths: &[Path], i: &Inputs, pid: u32) -> u64 {
    let already = i
        .ucx
        .as_ref()
        .and_then(|u| u.processes.iter().find(|u| u.pid == pid))
        .map_or(0, |u| u.copies.already_staged_bytes);
    let staged: u64 = paths
        .iter()
        .filter(|p| p.pid == pid && p.host_staged && p.peer_kind != PeerKind::NcclCommunicator)
        .map(|p| p.staged_bytes)
        .sum();
    staged.saturating_sub(already)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(op: OpClass, transport: Transport, bytes: u64, evidence: String) -> Path {
        let mut p = Path::new(1, PeerKind::UcxEndpoint, "0x10".into(), op, "host");
        p.transport = transport;
        p.bytes = bytes;
        p.calls = 1;
        p.evidence = vec![evidence];
        p
    }

    fn verdict(paths: &[Path]) -> Transport {
        let mut v = Vec::new();
        summarize(
            &ProcessIn {
                pid: 1,
                ..Default::default()
            },
            paths,
            None,
            &mut v,
        );
        v[0].transport
    }

    /// A path undecided beside a larger one splits no verdict (a receiver's
    /// acknowledgements beside its receives, on a loaded host); an unknown
    /// path of its own does, and undecided paths alone stay unknown.
    #[test]
    fn an_undecided_path_beside_a_larger_one_splits_no_verdict() {
        let recv = path(OpClass::Recv, Transport::Socket, 1 << 30, "tcp".into());
        let mut ack = path(OpClass::Send, Transport::Unknown, 1 << 26, String::new());
        ack.evidence.clear();
        ack.mark_beside();
        assert_eq!(verdict(&[recv.clone(), ack.clone()]), Transport::Socket);
        let own = path(
            OpClass::Send,
            Transport::Unknown,
            1 << 26,
            "not enough to decide".into(),
        );
        assert_eq!(verdict(&[recv, own]), Transport::Mixed);
        assert_eq!(verdict(&[ack]), Transport::Unknown);
    }
}
