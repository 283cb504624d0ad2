//! One job across nodes (`gdrtrace job FILE...`, schema `gdrtrace.job/v1`,
//! docs/job.md): the reports of several nodes (or ranks) joined per NCCL
//! communicator by the identity every rank shares, NCCL's `commId` (the
//! hash of the `ncclUniqueId` each passed to `ncclCommInitRank*`, or, where
//! the set-up was not traced, the hash NCCL's RAS service lists for the
//! rank's pid: `comm_id_source`); ranks with neither, joined by their TCP
//! connections into one job without a `commId`. Per communicator: its
//! ranks, the host each ran on (as NCCL tells hosts apart: `NCCL_HOSTID`,
//! else host name and boot id), each rank's transport verdict and paths,
//! why it fell back, and the ranks no input was given for. The same view
//! is built from `serve`'s series in Prometheus (`prometheus.rs`).
pub mod prometheus;
mod render;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

pub use self::render::render;

use crate::{
    classify::path::PeerKind,
    identity::{
        Connection, IdSource,
        ras::{Mapping, NcclRas, RasAnswer},
    },
    report::Report,
};

pub const SCHEMA: &str = "gdrtrace.job/v1";

/// The cross-node view.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Job {
    pub schema: String,
    /// The files read, in the order given (or the Prometheus queried).
    pub inputs: Vec<String>,
    pub communicators: Vec<JobComm>,
    /// NCCL communicators with no identity to join them by, each with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unjoined: Vec<Unjoined>,
}

/// One communicator of the job, or (no `comm_id`) ranks of one job joined
/// by their TCP connections.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct JobComm {
    /// NCCL's `commId` (`0x` and 16 hex digits); null for ranks joined by
    /// their connections only.
    pub comm_id: Option<String>,
    /// Where the ranks' identities came from, each source once.
    #[serde(default)]
    pub comm_id_sources: Vec<IdSource>,
    /// The rank count the ranks passed (the largest, if they disagree);
    /// null where no rank's is known.
    pub nranks: Option<u32>,
    /// Distinct hosts among the ranks seen (NCCL's notion of a host).
    pub hosts: usize,
    /// One entry per rank seen, by rank.
    pub ranks: Vec<JobRank>,
    /// Ranks of `0..nranks` that no input holds.
    pub missing: Vec<u32>,
    /// Where NCCL's RAS service placed the missing ranks, where it was asked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_placed: Vec<Placed>,
    /// Ranks whose process's traffic went through host memory
    /// (`host_staged` verdicts).
    pub fell_back: Vec<u32>,
    /// The transports of the ranks, each once, in rank order.
    pub transports: Vec<String>,
}

/// A rank no input holds, as NCCL's RAS service lists it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Placed {
    pub rank: u32,
    pub pid: i64,
    pub host: String,
}

/// One rank of a communicator: where it ran and what its process did.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct JobRank {
    /// Null where it is not known (set-up not traced, no RAS answer).
    pub rank: Option<u32>,
    /// The input it came from.
    pub source: String,
    /// The host as NCCL names it to itself: `NCCL_HOSTID` when the process
    /// set it, else the host name (with the boot id, its `host_key`).
    pub host: String,
    /// NCCL's host-hash input: `NCCL_HOSTID`, or host name + boot id;
    /// empty when the report has neither.
    pub host_key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_hostid: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub boot_id: String,
    pub pid: u32,
    pub comm: String,
    /// The local `ncclComm_t` (serve's `local-N` where it had no identity).
    pub communicator: String,
    /// Where its identity came from (absent: not said, as in Prometheus).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm_id_source: Option<IdSource>,
    /// The GPUs the process could see (`CUDA_VISIBLE_DEVICES`), when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<String>,
    /// The verdict of the rank's process (`unknown` when none).
    pub transport: String,
    pub host_staged: bool,
    /// Why it fell back, when the verdict has a cause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// The kind of that cause (`serve`'s `cause` label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause_kind: Option<String>,
    /// Collective calls and bytes on this communicator (estimated where
    /// the duty cycle sampled them, as the report's `collectives[]`).
    pub calls: u64,
    pub bytes: u64,
    /// The rank's paths on this communicator (docs/paths.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<RankPath>,
}

/// One path of a rank on its communicator.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RankPath {
    /// `collective` or `p2p`.
    pub op: String,
    pub memory: String,
    pub transport: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub via: String,
    pub host_staged: bool,
    pub bytes: u64,
    pub host_bytes: u64,
}

/// Why a communicator has no identity.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum NoIdentity {
    /// Its init was traced but the id not read: a call without one
    /// (`ncclCommInitAll`), an id the probe could not read, or a recording
    /// made before gdrtrace read ids.
    IdNotRead,
    /// Its init was not traced (attach, serve after the job started).
    SetUpNotTraced,
}

impl NoIdentity {
    fn describe(self, init: &str) -> String {
        match self {
            NoIdentity::IdNotRead if init == "ncclCommInitAll" => {
                "ncclCommInitAll takes no ncclUniqueId (one process holds every rank)".into()
            }
            NoIdentity::IdNotRead => format!(
                "{init} was traced but its ncclUniqueId not read (a recording made before 2026-12-06, whose id slots cannot be trusted, or an id the probe could not read)"
            ),
            NoIdentity::SetUpNotTraced => "set-up not traced (the tracer attached after ncclCommInitRank*)".into(),
        }
    }
}

/// A communicator with no identity to join it by.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Unjoined {
    pub source: String,
    pub pid: u32,
    pub comm: String,
    pub communicator: String,
    /// The init call, where it was traced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nranks: Option<u32>,
    pub why: NoIdentity,
    /// The other sources, and what each gave.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tried: Vec<String>,
}

/// One (process, communicator) of an input: what the joining reads,
/// from a report (`members_of`) or from Prometheus's series.
#[derive(Clone, Debug)]
pub struct Member {
    /// The input's place in the order given.
    pub input: usize,
    /// Its line of the view (the host placed later).
    pub view: JobRank,
    /// The identity and where it came from.
    pub comm_id: Option<(String, Option<IdSource>)>,
    pub nranks: Option<u32>,
    pub init: Option<String>,
    /// The process's TCP connections (the same for each of its communicators).
    pub connections: Vec<Connection>,
    /// What was tried where there is no identity.
    pub tried: Vec<String>,
}

/// Joins the reports (each with the name of its input).
pub fn join(reports: &[(String, Report)]) -> Job {
    let members = reports
        .iter()
        .enumerate()
        .flat_map(|(i, (source, r))| members_of(i, source, r))
        .collect();
    let placed = reports
        .iter()
        .filter_map(|(_, r)| r.nccl_ras.as_ref())
        .collect::<Vec<_>>();
    assemble(reports.iter().map(|(s, _)| s.clone()).collect(), members, &placed)
}

/// The members of one report: each process's communicators, those with
/// collective calls and those whose init was traced.
pub fn members_of(input: usize, source: &str, r: &Report) -> Vec<Member> {
    let mut out = Vec::new();
    for p in &r.processes {
        let verdict = r.verdicts.iter().find(|v| v.pid == p.pid);
        let mut handles: BTreeSet<&str> = p.communicators.iter().map(|c| c.communicator.as_str()).collect();
        handles.extend(
            r.collectives
                .iter()
                .filter(|k| k.pid == p.pid && k.communicator != "0x0")
                .map(|k| k.communicator.as_str()),
        );
        let hostid = crate::classify::comm::host_id(&p.env).map(String::from);
        let (hostname, boot_id) = (r.facts.hostname.clone(), r.facts.boot_id.clone());
        for handle in handles {
            let ident = p.communicators.iter().rev().find(|c| c.communicator == handle);
            let (calls, bytes) = r
                .collectives
                .iter()
                .filter(|k| k.pid == p.pid && k.communicator == handle)
                .fold((0, 0), |(c, b), k| (c + k.calls, b + k.bytes));
            let paths = r
                .paths
                .iter()
                .filter(|x| x.pid == p.pid && x.peer_kind == PeerKind::NcclCommunicator && x.peer == handle)
                .map(|x| RankPath {
                    op: x.op.name().into(),
                    memory: x.memory.clone(),
                    transport: x.transport.name().into(),
                    via: x.via.clone(),
                    host_staged: x.host_staged,
                    bytes: x.bytes,
                    host_bytes: x.host_bytes,
                })
                .collect();
            let comm_id = ident.and_then(|c| Some((c.comm_id.clone()?, c.comm_id_source)));
            let tried = if comm_id.is_none() {
                tried(r.nccl_ras.as_ref(), p.pid, handle, &p.connections)
            } else {
                Vec::new()
            };
            out.push(Member {
                input,
                view: JobRank {
                    rank: ident.and_then(|c| c.rank),
                    source: source.to_string(),
                    host: String::new(),
                    host_key: String::new(),
                    nccl_hostid: hostid.clone(),
                    hostname: hostname.clone(),
                    boot_id: boot_id.clone(),
                    pid: p.pid,
                    comm: p.comm.clone(),
                    communicator: handle.to_string(),
                    comm_id_source: comm_id.as_ref().and_then(|c| c.1),
                    devices: p.env.get("CUDA_VISIBLE_DEVICES").cloned(),
                    transport: verdict.map_or("unknown".to_string(), |v| v.transport.name().to_string()),
                    host_staged: verdict.is_some_and(|v| v.host_staged),
                    cause: verdict.and_then(|v| v.cause.clone()),
                    cause_kind: verdict.and_then(|v| v.cause_kind).map(|k| k.id().to_string()),
                    calls,
                    bytes,
                    paths,
                },
                comm_id,
                nranks: ident.and_then(|c| c.nranks),
                init: ident.map(|c| c.init.clone()).filter(|i| !i.is_empty()),
                connections: p.connections.clone(),
                tried,
            });
        }
    }
    out
}

/// What the other identity sources gave for a communicator without one.
fn tried(ras: Option<&NcclRas>, pid: u32, handle: &str, connections: &[Connection]) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(ras) = ras {
        let at = &ras.query.addr;
        out.push(match (&ras.query.answer, ras.mapping(pid, handle)) {
            (RasAnswer::Error(e), _) => format!("NCCL's RAS at {at}: {e}"),
            (_, Some(Mapping::Ambiguous { candidates })) => format!(
                "NCCL's RAS at {at} lists pid {pid} in {} communicators ({}), and their collectives do not tell which this is",
                candidates.len(),
                candidates.join(", ")
            ),
            (_, Some(Mapping::NotListed)) => {
                format!("NCCL's RAS at {at} lists no communicator with pid {pid} (another job's RAS, or another pid namespace)")
            }
            (_, Some(Mapping::Matched { .. })) | (_, None) => {
                format!("NCCL's RAS at {at} answered before this communicator made a call")
            }
        });
    }
    out.push(if connections.is_empty() {
        "connections: no established TCP connection read".into()
    } else {
        format!(
            "connections: none of its {} TCP connection(s) reaches another traced rank among the inputs",
            connections.len()
        )
    });
    out
}

/// The host of a rank as NCCL tells hosts apart.
fn place(r: &mut JobRank) {
    r.host_key = match &r.nccl_hostid {
        Some(h) => h.clone(),
        None => format!("{}{}", r.hostname, r.boot_id),
    };
    if r.host.is_empty() {
        r.host = match (&r.nccl_hostid, r.hostname.is_empty()) {
            (Some(h), _) => h.clone(),
            (None, false) => r.hostname.clone(),
            (None, true) => format!("? ({})", r.source),
        };
    }
}

/// The view of the members: one communicator per `commId`, then the
/// members without one that share a TCP connection, joined into one job
/// each; the rest not joined, with why.
pub fn assemble(inputs: Vec<String>, members: Vec<Member>, ras: &[&NcclRas]) -> Job {
    let mut by_id: BTreeMap<String, Vec<Member>> = BTreeMap::new();
    let mut anonymous = Vec::new();
    for m in members {
        match &m.comm_id {
            Some((id, _)) => by_id.entry(id.clone()).or_default().push(m),
            None => anonymous.push(m),
        }
    }
    let anonymous = join_connected(&mut by_id, anonymous, ras);
    let mut communicators: Vec<JobComm> = by_id
        .into_iter()
        .map(|(id, ms)| {
            let placed: Vec<&crate::identity::ras::RasComm> = ras.iter().filter_map(|r| r.communicator(&id)).collect();
            let nranks = ms
                .iter()
                .filter_map(|m| m.nranks)
                .chain(placed.iter().map(|c| c.size))
                .max();
            let mut c = communicator(Some(id), nranks, ms);
            let mut missing_placed: BTreeSet<Placed> = BTreeSet::new();
            for rc in placed {
                for r in rc.ranks.iter().chain(&rc.missing_ranks) {
                    if c.missing.contains(&r.rank) {
                        missing_placed.insert(Placed {
                            rank: r.rank,
                            pid: r.pid,
                            host: r.host.clone(),
                        });
                    }
                }
            }
            c.missing_placed = missing_placed.into_iter().collect();
            c
        })
        .collect();
    // Processes without an identity holding two ends of one connection.
    let procs: Vec<(usize, u32)> = anonymous
        .iter()
        .map(|m| (m.input, m.view.pid))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let conns_of = |(input, pid): (usize, u32)| {
        anonymous
            .iter()
            .find(|m| m.input == input && m.view.pid == pid)
            .map_or(&[][..], |m| m.connections.as_slice())
    };
    let mut group: Vec<usize> = (0..procs.len()).collect();
    fn root(g: &mut [usize], mut i: usize) -> usize {
        while g[i] != i {
            g[i] = g[g[i]];
            i = g[i];
        }
        i
    }
    for a in 0..procs.len() {
        for b in a + 1..procs.len() {
            if crate::identity::connections::connected(conns_of(procs[a]), conns_of(procs[b])) {
                let (ra, rb) = (root(&mut group, a), root(&mut group, b));
                group[rb] = ra;
            }
        }
    }
    let mut joined: BTreeMap<usize, Vec<Member>> = BTreeMap::new();
    let mut unjoined = Vec::new();
    for m in anonymous {
        let i = procs
            .iter()
            .position(|p| *p == (m.input, m.view.pid))
            .expect("every member's process is listed");
        let r = root(&mut group, i);
        let size = (0..procs.len()).filter(|j| root(&mut group, *j) == r).count();
        if size > 1 {
            joined.entry(r).or_default().push(m);
        } else {
            unjoined.push(Unjoined {
                source: m.view.source.clone(),
                pid: m.view.pid,
                comm: m.view.comm.clone(),
                communicator: m.view.communicator.clone(),
                why: if m.init.is_some() {
                    NoIdentity::IdNotRead
                } else {
                    NoIdentity::SetUpNotTraced
                },
                init: m.init,
                rank: m.view.rank,
                nranks: m.nranks,
                tried: m.tried,
            });
        }
    }
    for (_, mut ms) in joined {
        for m in &mut ms {
            m.view.comm_id_source = Some(IdSource::Connections);
        }
        let nranks = ms.iter().filter_map(|m| m.nranks).max();
        communicators.push(communicator(None, nranks, ms));
    }
    Job {
        schema: SCHEMA.into(),
        inputs,
        communicators,
        unjoined,
    }
}

/// The members without identity whose process holds the other end of a
/// TCP connection of a process in exactly one communicator with a `commId`
/// join that communicator (source `connections`), with the rank RAS gave
/// their pid in it, if any; the others are returned.
fn join_connected(by_id: &mut BTreeMap<String, Vec<Member>>, anonymous: Vec<Member>, ras: &[&NcclRas]) -> Vec<Member> {
    let mut rest = Vec::new();
    for mut m in anonymous {
        let ids: Vec<&String> = by_id
            .iter()
            .filter(|(_, ms)| {
                ms.iter().any(|o| {
                    (o.input, o.view.pid) != (m.input, m.view.pid)
                        && crate::identity::connections::connected(&o.connections, &m.connections)
                })
            })
            .map(|(id, _)| id)
            .collect();
        let [id] = ids.as_slice() else {
            rest.push(m);
            continue;
        };
        let id = (*id).clone();
        let ms = by_id.get_mut(&id).expect("a communicator found above");
        let taken: BTreeSet<u32> = ms.iter().filter_map(|o| o.view.rank).collect();
        m.view.rank = ras
            .iter()
            .filter_map(|r| r.communicator(&id))
            .flat_map(|c| &c.ranks)
            .find(|r| r.pid == i64::from(m.view.pid) && !taken.contains(&r.rank))
            .map(|r| r.rank);
        m.view.comm_id_source = Some(IdSource::Connections);
        ms.push(m);
    }
    rest
}

/// One communicator of members that belong together.
fn communicator(comm_id: Option<String>, nranks: Option<u32>, ms: Vec<Member>) -> JobComm {
    let mut ranks: Vec<JobRank> = ms
        .into_iter()
        .map(|m| {
            let mut r = m.view;
            place(&mut r);
            r
        })
        .collect();
    ranks.sort_by(|a, b| (a.rank, &a.source, a.pid).cmp(&(b.rank, &b.source, b.pid)));
    let seen: BTreeSet<u32> = ranks.iter().filter_map(|r| r.rank).collect();
    let hosts = ranks
        .iter()
        .map(|r| (&r.host_key, &r.host))
        .collect::<BTreeSet<_>>()
        .len();
    let mut transports: Vec<String> = Vec::new();
    let mut sources: Vec<IdSource> = Vec::new();
    for r in &ranks {
        if !transports.contains(&r.transport) {
            transports.push(r.transport.clone());
        }
        if let Some(s) = r.comm_id_source
            && !sources.contains(&s)
        {
            sources.push(s);
        }
    }
    sources.sort();
    JobComm {
        comm_id,
        comm_id_sources: sources,
        nranks,
        hosts,
        missing: (0..nranks.unwrap_or(0)).filter(|r| !seen.contains(r)).collect(),
        missing_placed: Vec::new(),
        fell_back: ranks
            .iter()
            .filter(|r| r.host_staged)
            .filter_map(|r| r.rank)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
        transports,
        ranks,
    }
}

#[cfg(test)]
mod tests;
