//! NCCL's own log (`NCCL_DEBUG=INFO`): its transport per channel and its
//! GPUDirect, network and host-identity lines, per process and
//! communicator, against the tracer's verdicts. Corroboration only: a
//! verdict never comes from the log alone.
use std::collections::BTreeMap;

use serde::Serialize;

use super::{LogAgreement, Net, Verdict};
use crate::classify::Transport;

/// NCCL's transport lines in its log, per pid: `host:PID:TID [d] NCCL INFO
/// Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM`.
pub fn parse_nccl_log(text: &str) -> BTreeMap<u32, Vec<String>> {
    let mut out: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for line in text.lines() {
        let Some((_, via)) = line.split_once(" via ") else {
            continue;
        };
        if !line.contains("NCCL INFO") {
            continue;
        }
        let pid = line
            .split(':')
            .nth(1)
            .and_then(|p| p.trim().parse::<u32>().ok())
            .unwrap_or(0);
        let via = via.split_whitespace().next().unwrap_or("").to_string();
        let v = out.entry(pid).or_default();
        if !v.contains(&via) {
            v.push(via);
        }
    }
    out
}

/// The verdict NCCL's own `via` string stands for.
pub fn transport_of_via(via: &str) -> Transport {
    if via.starts_with("P2P") {
        Transport::P2pNvlink
    } else if via.starts_with("SHM") {
        Transport::Shm
    } else {
        match Net::of_via(via) {
            Some(Net::Socket) => Transport::Socket,
            Some(Net::IbGdr) => Transport::GdrPeerMem,
            Some(Net::Ib) => Transport::HostStaged,
            None => Transport::Unknown,
        }
    }
}

/// Whether NCCL's `via` and the tracer's transport say the same: NCCL's
/// `P2P` does not name the link, nor its `GDRDMA` how GPU memory was
/// registered (peer memory or dma-buf).
pub fn via_agrees(via: &str, t: Transport) -> bool {
    let n = transport_of_via(via);
    n == t
        || (n == Transport::P2pNvlink && t == Transport::P2pPcie)
        || (n == Transport::GdrPeerMem && t == Transport::GdrDmabuf)
}

/// The `via`s a verdict answers for: a rank whose channels include NCCL's
/// network answers for its network path (the traffic between hosts), its
/// P2P/SHM channels to ranks of its own host aside.
pub fn judged_vias(vias: &[String]) -> impl Iterator<Item = &String> {
    let net = vias.iter().any(|v| Net::of_via(v).is_some());
    vias.iter().filter(move |v| !net || Net::of_via(v).is_some())
}

/// Attaches NCCL's log view to each verdict and says whether they agree.
pub fn corroborate(verdicts: &mut [Verdict], log: &BTreeMap<u32, Vec<String>>) {
    for v in verdicts {
        let Some(vias) = log.get(&v.pid) else { continue };
        let agrees = judged_vias(vias).all(|via| via_agrees(via, v.transport));
        v.nccl_log = Some(LogAgreement {
            nccl_says: vias.join(", "),
            agrees,
        });
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
    /// The tracer's verdict for this communicator (its collectives' transport, else the process's).
    #[serde(default, deserialize_with = "crate::intern::opt")]
    pub tracer_says: Option<crate::intern::Name>,
    pub agrees: Option<bool>,
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
    /// [0]eth0:...`), at most 16.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub net_lines: Vec<String>,
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

/// As `nccl_log_agreement`, with the tracer's view of a (pid, communicator) given.
pub fn nccl_log_against(text: &str, tracer: &dyn Fn(u32, &str) -> Option<&'static str>) -> NcclLog {
    let mut comms: Vec<LogCommunicator> = Vec::new();
    let mut current: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    let mut last_of_pid: BTreeMap<u32, usize> = BTreeMap::new();
    let mut procs: BTreeMap<u32, LogProcess> = BTreeMap::new();
    for line in text.lines() {
        let Some((pid, tid, msg)) = log_line(line) else {
            continue;
        };
        if let Some(w) = msg.strip_prefix("WARN ") {
            let p = procs.entry(pid).or_insert_with(|| LogProcess {
                pid,
                ..Default::default()
            });
            if p.warnings.len() < 16 {
                p.warnings.push(w.trim().to_string());
            }
            continue;
        }
        let Some(msg) = msg.strip_prefix("INFO ") else { continue };
        if msg.contains("ncclCommInitRank comm ") || msg.starts_with("ncclCommInitRankConfig comm ") {
            let handle = word_after(msg, "comm").unwrap_or("").to_string();
            let i = match comms.iter().position(|c| c.pid == pid && c.communicator == handle) {
                Some(i) => i,
                None => {
                    comms.push(LogCommunicator {
                        pid,
                        communicator: handle,
                        rank: word_after(msg, "rank").and_then(|v| v.parse().ok()),
                        nranks: word_after(msg, "nranks").and_then(|v| v.parse().ok()),
                        vias: Vec::new(),
                        gdr: None,
                        nccl_says: Vec::new(),
                        tracer_says: None,
                        agrees: None,
                    });
                    comms.len() - 1
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
        if let Some((_, via)) = msg.split_once(" via ") {
            let via = via.split_whitespace().next().unwrap_or("").to_string();
            if let Some(i) = at
                && !comms[i].vias.contains(&via)
            {
                comms[i].vias.push(via);
            }
        } else if msg.contains("GPU Direct RDMA") {
            let p = procs.entry(pid).or_insert_with(|| LogProcess {
                pid,
                ..Default::default()
            });
            p.gdr_lines.push(msg.trim().to_string());
        } else if let Some(id) = msg.trim().strip_prefix("NCCL_HOSTID set by environment to ") {
            let p = procs.entry(pid).or_insert_with(|| LogProcess {
                pid,
                ..Default::default()
            });
            p.host_id = Some(id.trim().to_string());
        } else if let Some(name) = msg.trim().strip_prefix("Using network ") {
            let p = procs.entry(pid).or_insert_with(|| LogProcess {
                pid,
                ..Default::default()
            });
            p.network = Some(name.trim().to_string());
        } else if msg.starts_with("NET/") {
            let p = procs.entry(pid).or_insert_with(|| LogProcess {
                pid,
                ..Default::default()
            });
            let line = msg.trim().to_string();
            if p.net_lines.len() < 16 && !p.net_lines.contains(&line) {
                p.net_lines.push(line);
            }
        } else if let Some(g) = word_after(msg, "GDR").filter(|_| msg.contains("use ring"))
            && let Some(i) = at
        {
            comms[i].gdr = Some(g == "1");
        }
    }
    for c in &mut comms {
        let mut says: Vec<&'static str> = c.vias.iter().map(|v| transport_of_via(v).name()).collect();
        says.dedup();
        says.sort();
        says.dedup();
        c.nccl_says = says;
        c.tracer_says = tracer(c.pid, &c.communicator);
        // An undecided verdict (unknown, ambiguous) neither agrees nor disagrees.
        let decided = |t: &&str| !matches!(Transport::from_name(t), Transport::Unknown | Transport::Ambiguous);
        c.agrees = c
            .tracer_says
            .filter(|t| !c.vias.is_empty() && decided(t))
            .map(|t| judged_vias(&c.vias).all(|via| via_agrees(via, Transport::from_name(t))));
    }
    NcclLog {
        communicators: comms,
        processes: procs.into_values().collect(),
    }
}
