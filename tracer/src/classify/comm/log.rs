//! NCCL's own log (`NCCL_DEBUG=INFO`): its transport per channel and peer,
//! its GPUDirect, network and host-identity lines, per process and
//! communicator, against the tracer's verdicts. Corroboration only: a
//! verdict never comes from the log alone. The line formats are NCCL's
//! (src/transport/{p2p,shm,net,coll_net}.cc, src/init.cc) and its network
//! plugins' (aws-ofi-nccl's `NET/OFI` lines, nccl-rdma-sharp-plugins).
use std::collections::BTreeMap;

use serde::Serialize;

use super::{LogAgreement, Net, Network, Plugin, Verdict, cause_kind_on, cause_on};
use crate::classify::{Transport, path::PeerGroup};

/// NCCL's transport lines in its log, per pid: `host:PID:TID [d] NCCL INFO
/// Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM`, and `NVLS` for a
/// communicator with NVLS channels.
pub fn parse_nccl_log(text: &str) -> BTreeMap<u32, Vec<String>> {
    parse(text).vias
}

/// The verdict NCCL's own `via` string stands for.
pub fn transport_of_via(via: &str) -> Transport {
    if via.starts_with("P2P") {
        Transport::P2pNvlink
    } else if via.starts_with("SHM") {
        Transport::Shm
    } else {
        Net::of_via(via).map_or(Transport::Unknown, Net::transport)
    }
}

/// Whether NCCL's `via` and the tracer's transport say the same: NCCL's
/// `P2P` does not name the link, nor its `GDRDMA` how GPU memory was
/// registered (peer memory or dma-buf); a plugin without GPUDirect RDMA
/// other than NCCL's own may send over TCP (libfabric's tcp provider).
pub fn via_agrees(via: &str, t: Transport) -> bool {
    let n = transport_of_via(via);
    n == t
        || (n == Transport::P2pNvlink && t == Transport::P2pPcie)
        || (n == Transport::GdrPeerMem && t == Transport::GdrDmabuf)
        || (t == Transport::Socket
            && Net::of_via(via).is_some_and(|n| !n.gdr && matches!(n.plugin, Plugin::Ofi | Plugin::Other)))
}

/// The `via`s a verdict answers for: a rank whose channels include NCCL's
/// network answers for its network path (the traffic between hosts), its
/// P2P/SHM channels to ranks of its own host aside.
pub fn judged_vias(vias: &[String]) -> impl Iterator<Item = &String> {
    let net = vias
        .iter()
        .any(|v| PeerGroup::of_via(v).is_some_and(|g| g != PeerGroup::Local));
    vias.iter()
        .filter(move |v| !net || PeerGroup::of_via(v).is_some_and(|g| g != PeerGroup::Local))
}

/// The network NCCL's log names among `vias` for the tracer's transports:
/// the first that agrees with one of them, NCCL's network before CollNet
/// before NVLS.
pub fn named_net<'a>(vias: impl IntoIterator<Item = &'a String>, tracer: &[Transport]) -> Option<Net> {
    let mut nets: Vec<Net> = vias
        .into_iter()
        .filter(|v| tracer.iter().any(|t| via_agrees(v, *t)))
        .filter_map(|v| Net::of_via(v))
        .collect();
    nets.sort_by_key(|n| match n.plugin {
        Plugin::CollNet => 1,
        Plugin::Nvls => 2,
        _ => 0,
    });
    nets.first().copied()
}

/// How NCCL's `via`s compare with what the tracer decided for the same
/// process or communicator.
struct Comparison<'a> {
    agree: Vec<&'a str>,
    disagree: Vec<&'a str>,
    /// NCCL's network where the tracer judged no network path at all: its
    /// traffic was not seen (a plugin's calls the tracer does not trace, or
    /// no evidence of one kind of connection), neither confirmed nor contradicted.
    unseen: Vec<&'a str>,
}

impl Comparison<'_> {
    fn agrees(&self) -> bool {
        self.disagree.is_empty() && (self.unseen.is_empty() || !self.agree.is_empty())
    }
}

/// Whether a transport is a decision (not `unknown` or `ambiguous`).
fn decided(t: Transport) -> bool {
    !matches!(t, Transport::Unknown | Transport::Ambiguous)
}

/// Compares `vias` with the tracer's transports (several when its paths
/// differ: then every via answers); `net_seen`: the tracer named a network.
fn compare<'a>(vias: &'a [String], tracer: &[Transport], net_seen: bool) -> Comparison<'a> {
    let seen: Vec<Transport> = tracer.iter().copied().filter(|t| decided(*t)).collect();
    let judged: Vec<&String> = if tracer.len() > 1 {
        vias.iter().collect()
    } else {
        judged_vias(vias).collect()
    };
    let net_seen = net_seen || seen.iter().any(|t| Net::of(*t).is_some());
    let mut c = Comparison {
        agree: Vec::new(),
        disagree: Vec::new(),
        unseen: Vec::new(),
    };
    for via in judged {
        if seen.iter().any(|t| via_agrees(via, *t)) {
            c.agree.push(via);
        } else if !net_seen && Net::of_via(via).is_some_and(|n| n.plugin != Plugin::Nvls) {
            c.unseen.push(via);
        } else {
            c.disagree.push(via);
        }
    }
    c
}

/// What a verdict that named no network says of NCCL's network lines.
fn unseen_text(unseen: &[&str], tracer: &[Transport]) -> String {
    let saw: Vec<&str> = tracer.iter().filter(|t| decided(**t)).map(|t| t.name()).collect();
    format!(
        "NCCL says {}, a network the tracer judged no traffic of (no memory registered with an RDMA NIC, no pinned staging buffers, no socket bytes for it; the tracer saw {}): neither confirmed nor contradicted",
        unseen.join(", "),
        if saw.is_empty() {
            "nothing it could judge".to_string()
        } else {
            saw.join(", ")
        }
    )
}

/// The transports a verdict stands for: its paths' for a `mixed` one.
fn verdict_transports(v: &Verdict) -> Vec<Transport> {
    if v.transport == Transport::Mixed {
        v.paths.iter().map(|s| s.transport).collect()
    } else {
        vec![v.transport]
    }
}

/// What corroborating verdicts needs of their processes: each one's
/// environment (the cause names its variables) and the host's RDMA devices.
#[derive(Clone, Debug, Default)]
pub struct Context {
    pub env: BTreeMap<u32, BTreeMap<String, String>>,
    pub rdma_devices: Option<Vec<String>>,
}

/// Attaches NCCL's log view to each verdict and says whether they agree;
/// where they do, the verdict's network takes the name NCCL gives it (a
/// plugin: `NET/Libfabric`, `NET/IBext_v8`), and a staged verdict's cause
/// names that network.
pub fn corroborate(verdicts: &mut [Verdict], log: &BTreeMap<u32, Vec<String>>, cx: &Context) {
    for v in verdicts {
        let Some(vias) = log.get(&v.pid) else { continue };
        let tracer = verdict_transports(v);
        let c = compare(vias, &tracer, v.net.is_some());
        v.nccl_log = Some(LogAgreement {
            nccl_says: vias.join(", "),
            agrees: c.agrees(),
            unseen: (!c.unseen.is_empty()).then(|| unseen_text(&c.unseen, &tracer)),
        });
        let Some(net) = named_net(vias, &tracer) else { continue };
        // A verdict that names no network (a report older than `net`) is
        // named only where its paths differ or NCCL's path is NVLS.
        if v.net.is_none() && v.transport != Transport::Mixed && net.plugin != Plugin::Nvls {
            continue;
        }
        let renamed = v.net != Some(net);
        v.net = Some(net);
        if renamed && v.transport != Transport::Mixed && v.cause.is_some() {
            let empty = BTreeMap::new();
            let env = cx.env.get(&v.pid).unwrap_or(&empty);
            let network = Network {
                other_hosts: v.other_hosts.clone(),
                rdma_devices: cx.rdma_devices.clone(),
            };
            v.cause = cause_on(env, v.transport, &network, Some(net));
            v.cause_kind = cause_kind_on(env, v.transport, &network, Some(net));
        }
    }
}

/// NCCL's log, per communicator, against the tracer's verdicts.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, PartialEq)]
#[serde(default)]
pub struct NcclLog {
    pub communicators: Vec<LogCommunicator>,
    pub processes: Vec<LogProcess>,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct LogCommunicator {
    pub pid: u32,
    /// `comm 0x...` of `ncclCommInitRank` (the handle the probes aggregate by).
    pub communicator: String,
    pub rank: Option<u32>,
    pub nranks: Option<u32>,
    /// Distinct `via` strings of its channels.
    pub vias: Vec<String>,
    /// `use ring PXN p GDR g`: NCCL's GPUDirect RDMA decision for the communicator.
    pub gdr: Option<bool>,
    #[serde(deserialize_with = "crate::intern::vec")]
    pub nccl_says: Vec<&'static str>,
    /// The tracer's verdict for this communicator (its paths' transports,
    /// else its collectives', else the process's).
    #[serde(default, deserialize_with = "crate::intern::opt")]
    pub tracer_says: Option<crate::intern::Name>,
    pub agrees: Option<bool>,
    /// `via`s of NCCL's network the tracer judged no traffic of.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unseen: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, PartialEq)]
#[serde(default)]
pub struct LogProcess {
    pub pid: u32,
    /// GPU Direct RDMA decision lines (`Disabled for HCA`, `(DMABUF) enabled`, distance).
    pub gdr_lines: Vec<String>,
    /// `NCCL WARN` lines (at most 16).
    pub warnings: Vec<String>,
    /// `NCCL_HOSTID set by environment to ID`: the host identity NCCL hashed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_id: Option<String>,
    /// `Using network NAME`: the network NCCL chose (`Socket`, `IB`, a plugin).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// NCCL's network lines (`NET/IB : No device found.`, `NET/Socket : Using
    /// [0]eth0:...`, a plugin's `NET/OFI ...`), at most 16.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub net_lines: Vec<String>,
    /// Network plugins NCCL loaded but could not initialize (`Failed to
    /// initialize NET plugin NAME`); NCCL's own IB aside (its lines say why).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed_plugins: Vec<String>,
}

impl LogProcess {
    /// NCCL's own line saying its IB network found no device.
    pub fn no_ib_device(&self) -> Option<&str> {
        self.net_lines
            .iter()
            .find(|l| l.starts_with("NET/IB") && l.contains("No device found"))
            .map(String::as_str)
    }
}

/// One rank's connections in one communicator, from NCCL's channel lines:
/// to each peer rank, to CollNet's switches, and NVLS.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Connections {
    /// This rank (its init line).
    pub rank: Option<u32>,
    /// Per peer rank, the distinct `via`s of the channels that join them.
    pub peers: BTreeMap<u32, Vec<String>>,
    /// CollNet's connections (`CollNet 00/0 : 0 [send] via COLLNET/SHARP/0`).
    pub collnet: Vec<String>,
    /// NVLS channels (`N nvls channels`).
    pub nvls_channels: u32,
    /// Channels this rank sends on, per peer group: the share of the
    /// communicator's bytes each group carries, as far as NCCL's rings and
    /// trees spread them evenly over channels.
    pub sends: BTreeMap<PeerGroup, u32>,
}

/// The peers of one group of a rank's connections.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Group {
    pub ranks: Vec<u32>,
    pub vias: Vec<String>,
    pub sends: u32,
}

impl Connections {
    /// Its connections by peer group: local ranks (P2P, SHM, NVLS), ranks
    /// through NCCL's network, CollNet's switches.
    pub fn groups(&self) -> BTreeMap<PeerGroup, Group> {
        let mut out: BTreeMap<PeerGroup, Group> = BTreeMap::new();
        let mut add = |via: &String, rank: Option<u32>| {
            let Some(g) = PeerGroup::of_via(via) else { return };
            let e = out.entry(g).or_default();
            if let Some(r) = rank
                && !e.ranks.contains(&r)
            {
                e.ranks.push(r);
            }
            if !e.vias.contains(via) {
                e.vias.push(via.clone());
            }
        };
        for (rank, vias) in &self.peers {
            for via in vias {
                add(via, Some(*rank));
            }
        }
        for via in &self.collnet {
            add(via, None);
        }
        if self.nvls_channels > 0 {
            add(&"NVLS".to_string(), None);
        }
        for (g, e) in &mut out {
            e.sends = self.sends.get(g).copied().unwrap_or(0);
        }
        out
    }
}

/// Each rank's connections per communicator, from NCCL's log: what splits
/// an NCCL path into one per peer group (`judge::peers`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogPeers(BTreeMap<(u32, String), Connections>);

impl LogPeers {
    pub fn of_log(text: &str) -> LogPeers {
        let p = parse(text);
        LogPeers(
            p.comms
                .into_iter()
                .zip(p.conns)
                .map(|(c, x)| ((c.pid, c.communicator), x))
                .collect(),
        )
    }

    /// The connections of `pid`'s rank in communicator `handle` (`0x...`).
    pub fn get(&self, pid: u32, handle: &str) -> Option<&Connections> {
        self.0.get(&(pid, handle.to_string()))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `host:PID:TID [dev] NCCL INFO message` -> (pid, tid, message).
fn log_line(line: &str) -> Option<(u32, u32, &str)> {
    let (head, rest) = line.split_once(" NCCL ")?;
    let mut parts = head.split_whitespace().next()?.rsplitn(3, ':');
    let tid = parts.next()?.parse().ok()?;
    let pid = parts.next()?.parse().ok()?;
    Some((pid, tid, rest))
}

fn word_after<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let mut it = text.split_whitespace();
    while let Some(w) = it.next() {
        if w == key {
            return it.next();
        }
    }
    None
}

/// The `via` of a channel line: the rest of the line, since NCCL ends its
/// channel lines with it and a plugin's name may hold a space (`NET/AWS
/// Libfabric/0/GDRDMA`).
fn via_of(rest: &str) -> String {
    let rest = rest.trim();
    rest.split_once(" comm 0x").map_or(rest, |(v, _)| v).trim().to_string()
}

/// A rank of a channel line's `0[0]` (rank, then the NVML device).
fn rank_of(s: &str) -> Option<u32> {
    let s = s.trim();
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s[..end].parse().ok()
}

/// One connection of a channel line (`Channel 00/0 : 0[0] -> 1[1] [send]
/// via ...`; P2P and SHM lines are printed by the sender alone, NET lines
/// by both sides): (peer rank, whether this rank sends on it).
fn connection(head: &str, me: Option<u32>) -> Option<(u32, bool)> {
    let (_, ends) = head.split_once(" : ")?;
    let receive = ends.contains("[receive]");
    let (from, to) = ends.split_once("->")?;
    let (from, to) = (rank_of(from)?, rank_of(to)?);
    let peer = match me {
        Some(me) if from == me => to,
        Some(me) if to == me => from,
        _ if receive => from,
        _ => to,
    };
    Some((peer, !receive))
}

/// `2 coll channels, 2 collnet channels, 0 nvls channels, ...` -> 0.
fn nvls_channels(msg: &str) -> Option<u32> {
    let (before, _) = msg.split_once(" nvls channels")?;
    before.rsplit(' ').next()?.parse().ok()
}

/// What one pass over an NCCL log finds.
#[derive(Default)]
struct Parsed {
    comms: Vec<LogCommunicator>,
    /// Each communicator's connections (same order as `comms`).
    conns: Vec<Connections>,
    procs: BTreeMap<u32, LogProcess>,
    /// Every `via` per pid (NVLS too), also outside a known communicator.
    vias: BTreeMap<u32, Vec<String>>,
}

impl Parsed {
    fn process(&mut self, pid: u32) -> &mut LogProcess {
        self.procs.entry(pid).or_insert_with(|| LogProcess {
            pid,
            ..Default::default()
        })
    }

    fn via(&mut self, pid: u32, at: Option<usize>, via: &str) {
        let v = self.vias.entry(pid).or_default();
        if !v.iter().any(|x| x == via) {
            v.push(via.to_string());
        }
        if let Some(i) = at
            && !self.comms[i].vias.iter().any(|x| x == via)
        {
            self.comms[i].vias.push(via.to_string());
        }
    }
}

/// One pass over the log: communicators, their channels per peer, and the
/// processes' GPUDirect, network and warning lines.
fn parse(text: &str) -> Parsed {
    let mut p = Parsed::default();
    let mut current: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    let mut last_of_pid: BTreeMap<u32, usize> = BTreeMap::new();
    for line in text.lines() {
        let Some((pid, tid, msg)) = log_line(line) else {
            continue;
        };
        if let Some(w) = msg.strip_prefix("WARN ") {
            let proc = p.process(pid);
            if proc.warnings.len() < 16 {
                proc.warnings.push(w.trim().to_string());
            }
            continue;
        }
        let Some(msg) = msg.strip_prefix("INFO ") else { continue };
        if msg.contains("ncclCommInitRank comm ") || msg.starts_with("ncclCommInitRankConfig comm ") {
            let handle = word_after(msg, "comm").unwrap_or("").to_string();
            let i = match p.comms.iter().position(|c| c.pid == pid && c.communicator == handle) {
                Some(i) => i,
                None => {
                    let rank = word_after(msg, "rank").and_then(|v| v.parse().ok());
                    p.comms.push(LogCommunicator {
                        pid,
                        communicator: handle,
                        rank,
                        nranks: word_after(msg, "nranks").and_then(|v| v.parse().ok()),
                        vias: Vec::new(),
                        gdr: None,
                        nccl_says: Vec::new(),
                        tracer_says: None,
                        agrees: None,
                        unseen: Vec::new(),
                    });
                    p.conns.push(Connections {
                        rank,
                        ..Connections::default()
                    });
                    p.comms.len() - 1
                }
            };
            if msg.ends_with("Init COMPLETE") {
                current.remove(&(pid, tid));
            } else {
                current.insert((pid, tid), i);
            }
            last_of_pid.insert(pid, i);
            continue;
        }
        let at = current.get(&(pid, tid)).or_else(|| last_of_pid.get(&pid)).copied();
        if let Some((head, rest)) = msg.split_once(" via ") {
            let via = via_of(rest);
            p.via(pid, at, &via);
            let Some(i) = at else { continue };
            let group = PeerGroup::of_via(&via);
            let conns = &mut p.conns[i];
            let send = if group == Some(PeerGroup::Switch) {
                if !conns.collnet.contains(&via) {
                    conns.collnet.push(via);
                }
                head.contains("[send]")
            } else if let Some((peer, send)) = connection(head, conns.rank) {
                let v = conns.peers.entry(peer).or_default();
                if !v.contains(&via) {
                    v.push(via);
                }
                send
            } else {
                false
            };
            if let (true, Some(g)) = (send, group) {
                *conns.sends.entry(g).or_default() += 1;
            }
        } else if let Some(n) = nvls_channels(msg).filter(|n| *n > 0) {
            p.via(pid, at, "NVLS");
            if let Some(i) = at {
                p.conns[i].nvls_channels = n;
            }
        } else if msg.contains("GPU Direct RDMA") {
            p.process(pid).gdr_lines.push(msg.trim().to_string());
        } else if let Some(id) = msg.trim().strip_prefix("NCCL_HOSTID set by environment to ") {
            p.process(pid).host_id = Some(id.trim().to_string());
        } else if let Some(name) = msg.trim().strip_prefix("Using network ") {
            p.process(pid).network = Some(name.trim().to_string());
        } else if let Some(name) = msg.trim().strip_prefix("Failed to initialize NET plugin ") {
            let name = name.trim().to_string();
            let proc = p.process(pid);
            if name != "IB" && !proc.failed_plugins.contains(&name) {
                proc.failed_plugins.push(name);
            }
        } else if msg.starts_with("NET/") {
            let line = msg.trim().to_string();
            let proc = p.process(pid);
            if proc.net_lines.len() < 16 && !proc.net_lines.contains(&line) {
                proc.net_lines.push(line);
            }
        } else if let Some(g) = word_after(msg, "GDR").filter(|_| msg.contains("use ring"))
            && let Some(i) = at
        {
            p.comms[i].gdr = Some(g == "1");
        }
    }
    p
}

/// NCCL's log per communicator, with the tracer's view of each (pid,
/// communicator): the transports of its paths (several where they differ).
pub fn nccl_log_against(text: &str, tracer: &dyn Fn(u32, &str) -> Vec<Transport>) -> NcclLog {
    let Parsed { mut comms, procs, .. } = parse(text);
    for c in &mut comms {
        let mut says: Vec<&'static str> = c.vias.iter().map(|v| transport_of_via(v).name()).collect();
        says.sort();
        says.dedup();
        c.nccl_says = says;
        let mut ts = tracer(c.pid, &c.communicator);
        ts.sort();
        ts.dedup();
        c.tracer_says = (!ts.is_empty())
            .then(|| crate::intern::intern(&ts.iter().map(|t| t.name()).collect::<Vec<_>>().join(", ")));
        // An undecided verdict (unknown, ambiguous) neither agrees nor disagrees.
        let cmp = compare(&c.vias, &ts, false);
        c.agrees = (!c.vias.is_empty() && ts.iter().any(|t| decided(*t)))
            .then(|| cmp.agrees())
            .filter(|_| !(cmp.agree.is_empty() && cmp.disagree.is_empty()));
        c.unseen = cmp.unseen.iter().map(|v| v.to_string()).collect();
    }
    NcclLog {
        communicators: comms,
        processes: procs.into_values().collect(),
    }
}
