//! NCCL paths per peer group. NCCL joins a rank to the ranks of its own
//! host over P2P, SHM or NVLS, to the others through its network, and to
//! CollNet's switches; where NCCL's log lists a communicator's connections
//! (`--nccl-log`, `comm::LogPeers`) and they fall in more than one group,
//! the communicator's path becomes one per group, each judged from the
//! process's evidence of that kind of connection (`comm::local_part`,
//! `comm::network_part`). The log says which peers there are and names
//! their network; it never says what carried their bytes. Without a log a
//! communicator keeps one path.
use std::collections::BTreeMap;

use super::{Inputs, ProcessIn};
use crate::classify::{
    Transport,
    comm::{self, Basis, Group, Net, Part, Verdict},
    path::{Path, PeerGroup},
};

/// Host-memory bytes of at least this share of a direct path's bytes,
/// moved in its time, keep it from being called direct.
pub(super) const HOST_CONTRADICTS: f64 = 0.1;

/// What the process's evidence says of each kind of its connections.
struct Parts {
    local: Option<Part>,
    network: Option<Part>,
    /// Where its peers are and the host's RDMA devices (for causes).
    where_: comm::Network,
}

impl Parts {
    fn of(i: &Inputs, p: &ProcessIn, v: Option<&Verdict>) -> Parts {
        let where_ = i.networks().remove(&p.pid).unwrap_or_default();
        let e = i.evidence(p, where_.clone());
        let mut parts = Parts {
            local: comm::local_part(&e),
            network: comm::network_part(&e),
            where_,
        };
        // A verdict of the steady state stands for its kind of connection.
        if let Some(v) = v.filter(|v| v.basis == Basis::SteadyState && v.transport != Transport::Unknown) {
            let part = Some(Part {
                transport: v.transport,
                host_staged: v.host_staged,
                evidence: v.evidence.clone(),
            });
            if Net::of(v.transport).is_some() {
                parts.network = parts.network.take().or(part);
            } else {
                parts.local = parts.local.take().or(part);
            }
        }
        parts
    }
}

/// The NCCL paths of one process (one per communicator and class), each
/// split by peer group where NCCL's log lists connections of more than
/// one group, and named as NCCL names its network.
pub(super) fn by_peer_group(i: &Inputs, p: &ProcessIn, v: Option<&Verdict>, paths: Vec<Path>) -> Vec<Path> {
    if i.nccl_peers.is_empty() {
        return paths;
    }
    let mut parts: Option<Parts> = None;
    let mut out = Vec::new();
    for path in paths {
        let Some(groups) = i.nccl_peers.get(p.pid, &path.peer).map(comm::Connections::groups) else {
            out.push(path);
            continue;
        };
        let parts = parts.get_or_insert_with(|| Parts::of(i, p, v));
        if groups.len() < 2 {
            let vias: Vec<String> = groups.into_values().flat_map(|g| g.vias).collect();
            out.push(named(path, &vias, p, parts));
        } else {
            out.extend(split(&path, &groups, p, parts));
        }
    }
    out
}

/// A path named by the network NCCL's log names for it, where the log
/// agrees with its transport; a staged path's cause names that network.
fn named(mut path: Path, vias: &[String], p: &ProcessIn, parts: &Parts) -> Path {
    let Some(net) = comm::named_net(vias, &[path.transport]) else {
        return path;
    };
    path.via = net.name().to_string();
    if path.host_staged && path.cause.is_some() {
        path.cause = comm::cause_on(&p.env, path.transport, &parts.where_, Some(net));
    }
    path
}

/// `a` times `num / den`, without overflow.
fn share(a: u64, num: u64, den: u64) -> u64 {
    (u128::from(a) * u128::from(num) / u128::from(den.max(1))) as u64
}

/// One path per peer group of a communicator's path, with its share of
/// the bytes by the channels this rank sends on to each group.
fn split(path: &Path, groups: &BTreeMap<PeerGroup, Group>, p: &ProcessIn, parts: &Parts) -> Vec<Path> {
    let sends: u64 = groups.values().map(|g| u64::from(g.sends)).sum();
    let mut out: Vec<Path> = groups
        .iter()
        .map(|(g, grp)| {
            let mut x = path.clone();
            x.peer_group = Some(*g);
            x.peer_ranks = grp.ranks.clone();
            x.peer_ranks.sort_unstable();
            x.bytes = if sends > 0 {
                share(path.bytes, u64::from(grp.sends), sends)
            } else {
                path.bytes / groups.len() as u64
            };
            let part = match g {
                PeerGroup::Local => parts.local.as_ref(),
                PeerGroup::Remote | PeerGroup::Switch => parts.network.as_ref(),
            };
            let who = match g {
                PeerGroup::Switch => {
                    "CollNet's switches (in-network reduction: the switches reduce the collective's data, not a fallback)".to_string()
                }
                _ => format!(
                    "ranks {}",
                    x.peer_ranks.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
                ),
            };
            x.cause = None;
            match part {
                Some(part) => {
                    x.transport = part.transport;
                    x.host_staged = part.host_staged;
                    x.evidence = part.evidence.clone();
                }
                None => {
                    x.transport = Transport::Unknown;
                    x.host_staged = false;
                    x.evidence = vec![format!(
                        "the tracer saw no set-up of these connections ({}): NCCL's log names them, nothing the tracer traced carried them",
                        match g {
                            PeerGroup::Local => "no peer buffers exported or imported",
                            _ => "no memory registered with an RDMA NIC, no pinned staging buffers, no socket bytes",
                        }
                    )];
                }
            }
            x.evidence.push(format!("NCCL's log: {} to {who}", grp.vias.join(", ")));
            x.evidence.push(if sends > 0 {
                format!(
                    "{} of the communicator's {} bytes: this group's share of the channels the rank sends on ({} of {}); the tracer counts bytes per communicator, not per peer",
                    x.bytes, path.bytes, grp.sends, sends
                )
            } else {
                format!(
                    "{} of the communicator's {} bytes, an even share: the tracer counts bytes per communicator, not per peer",
                    x.bytes, path.bytes
                )
            });
            let net = comm::named_net(&grp.vias, &[x.transport])
                .or_else(|| grp.vias.iter().find_map(|v| Net::of_via(v)).filter(|_| *g != PeerGroup::Local));
            x.via = match net {
                Some(n) => n.name().to_string(),
                None => grp.vias.join(", "),
            };
            x.staged_bytes = if x.host_staged { x.bytes } else { 0 };
            if x.host_staged {
                x.cause = comm::cause_on(&p.env, x.transport, &parts.where_, net);
            }
            x
        })
        .collect();
    // Host bytes of the communicator's time went through its staged
    // groups; with none staged they stand against the direct ones.
    let staged: u64 = out.iter().filter(|x| x.host_staged).map(|x| x.bytes).sum();
    for x in &mut out {
        let (num, den) = match (staged, x.host_staged) {
            (0, _) => (x.bytes, path.bytes),
            (_, true) => (x.bytes, staged),
            (_, false) => (0, 1),
        };
        x.host_bytes = share(path.host_bytes, num, den);
        x.shared_host_bytes = share(path.shared_host_bytes, num, den);
        x.device_bytes = share(path.device_bytes, x.bytes, path.bytes);
        let host = path.host_bytes;
        if staged == 0 && x.direct() && host as f64 >= HOST_CONTRADICTS * path.bytes.max(1) as f64 {
            x.evidence.push(format!(
                "but {host} bytes went through host memory (sockets, host copies) while this communicator's calls ran and none of its peer groups is staged"
            ));
            x.transport = Transport::Ambiguous;
        }
    }
    out
}
