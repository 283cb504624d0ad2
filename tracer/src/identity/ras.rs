//! NCCL's RAS service (NCCL 2.24+, on by default): every NCCL process runs
//! a RAS thread, and one of them on each host answers clients on
//! `localhost:28028` (`NCCL_RAS_ADDR`) about the whole job: its
//! communicators, each with its hash (the `commId` of NCCL's `Init` lines)
//! and its ranks' pids and hosts. The tracer asks it only when told to
//! (`--nccl-ras`), once per trace: RAS's collectives go through every
//! process of the job, and polling them has crashed jobs (NVIDIA/nccl#1762,
//! #1996).
//!
//! The protocol (NCCL's `src/ras/client_support.cc`): the client sends
//! `CLIENT PROTOCOL 2`, the server answers `SERVER PROTOCOL N`; `SET FORMAT
//! json` is answered `OK` since NCCL 2.28.7 (older ones answer `ERROR`, and
//! their text lists no hashes); `VERBOSE STATUS` is answered with the
//! status, after which the server closes the connection.
use std::{
    collections::BTreeMap,
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{TcpStream, ToSocketAddrs},
    sync::mpsc,
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};

/// Where NCCL's RAS listens unless `NCCL_RAS_ADDR` moves it.
pub const DEFAULT_ADDR: &str = "localhost:28028";
/// How long one query may take: RAS gives up on an unresponsive rank
/// after 10 s (`RAS_COLLECTIVE_LEG_TIMEOUT` and its extra time).
pub const DEADLINE: Duration = Duration::from_secs(15);
/// How long a connection may take to open.
const CONNECT: Duration = Duration::from_secs(2);
/// The most of an answer read: a status of thousands of ranks is a few MiB.
const MAX_ANSWER: u64 = 64 << 20;

/// One query and what it got, with the namespace pids of the traced
/// processes where they differ from the tracer's (RAS lists each rank's
/// own `getpid()`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RasQuery {
    pub addr: String,
    #[serde(flatten)]
    pub answer: RasAnswer,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ns_pids: BTreeMap<u32, u32>,
}

impl RasQuery {
    /// The query with the pids `pids` have in their own pid namespaces,
    /// where those differ (a process in a container).
    pub fn with_ns_pids(mut self, pids: impl IntoIterator<Item = u32>) -> Self {
        self.ns_pids = pids
            .into_iter()
            .filter_map(|p| Some((p, super::ns_pid(p)?)))
            .filter(|(p, n)| p != n)
            .collect();
        self
    }
}

/// RAS's status, or why there is none.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RasAnswer {
    Status(RasStatus),
    Error(String),
}

/// The parts of RAS's JSON status the tracer uses.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RasStatus {
    #[serde(default)]
    pub nccl_version: String,
    #[serde(default)]
    pub communicators: Vec<RasComm>,
}

/// One communicator of the job.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RasComm {
    /// NCCL's `commHash`, in the one spelling of [`super::hex_id`].
    #[serde(deserialize_with = "hash")]
    pub hash: String,
    /// Its rank count.
    pub size: u32,
    #[serde(default)]
    pub ranks: Vec<RasRank>,
    /// Ranks RAS did not hear from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_ranks: Vec<RasRank>,
}

/// One rank as RAS lists it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RasRank {
    pub rank: u32,
    /// The IP address of the rank's RAS peer (`unknown` when RAS has none).
    #[serde(default)]
    pub host: String,
    /// The rank's pid in its own pid namespace (-1: unknown).
    #[serde(default = "unknown_pid")]
    pub pid: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_dev: Option<i32>,
    /// Collective calls by NCCL function (`AllReduce`, ...) since init.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub collective_counts: BTreeMap<String, u64>,
}

fn unknown_pid() -> i64 {
    -1
}

fn hash<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    super::parse_id(&s).ok_or_else(|| serde::de::Error::custom(format!("\"{s}\" is not a communicator hash")))
}

/// Parses RAS's `VERBOSE STATUS` answer in JSON (`SET FORMAT json`).
pub fn parse(text: &str) -> Result<RasStatus, String> {
    serde_json::from_str(text).map_err(|e| format!("RAS's status is not the JSON NCCL writes ({e})"))
}

/// Asks the RAS service at `addr` (`HOST:PORT`) for its verbose status, in
/// JSON, within [`DEADLINE`]; never fails: an error is an answer too.
pub fn query(addr: &str) -> RasQuery {
    RasQuery {
        addr: addr.to_string(),
        answer: match exchange(addr) {
            Ok(s) => RasAnswer::Status(s),
            Err(e) => RasAnswer::Error(e),
        },
        ns_pids: BTreeMap::new(),
    }
}

fn exchange(addr: &str) -> Result<RasStatus, String> {
    let end = Instant::now() + DEADLINE;
    let addrs: Vec<_> = addr
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {addr}: {e}"))?
        .collect();
    // `localhost` may resolve to ::1 first while NCCL listens on 127.0.0.1.
    let mut last = format!("{addr} resolves to no address");
    let mut stream = None;
    for a in &addrs {
        match TcpStream::connect_timeout(a, CONNECT) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = format!("cannot connect to {a}: {e} (is an NCCL 2.24+ job with RAS on this host?)"),
        }
    }
    let stream = stream.ok_or(last)?;
    let left = || {
        end.saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    };
    let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
    let mut w = stream.try_clone().map_err(|e| io("the RAS connection", e))?;
    let mut r = BufReader::new(stream);
    let mut line = |r: &mut BufReader<TcpStream>, send: &str| -> Result<String, String> {
        r.get_ref()
            .set_read_timeout(Some(left()))
            .map_err(|e| io("the RAS connection", e))?;
        w.set_write_timeout(Some(left()))
            .map_err(|e| io("the RAS connection", e))?;
        w.write_all(send.as_bytes())
            .map_err(|e| io(&format!("sending {}", send.trim()), e))?;
        let mut got = String::new();
        (&mut *r)
            .take(4096)
            .read_line(&mut got)
            .map_err(|e| io(&format!("the answer to {}", send.trim()), e))?;
        Ok(got.trim().to_string())
    };
    let hello = line(&mut r, "CLIENT PROTOCOL 2\n")?;
    if !hello.starts_with("SERVER PROTOCOL ") {
        return Err(format!(
            "{addr} is not NCCL's RAS (it answered \"{hello}\" to CLIENT PROTOCOL 2)"
        ));
    }
    let format = line(&mut r, "SET FORMAT json\n")?;
    if format != "OK" {
        return Err(format!(
            "NCCL's RAS at {addr} answers in text only (\"{format}\" to SET FORMAT json: NCCL before 2.28.7), which lists no communicator hashes"
        ));
    }
    line(&mut r, "VERBOSE STATUS\n").and_then(|first| {
        let mut rest = String::new();
        r.get_ref()
            .set_read_timeout(Some(left()))
            .map_err(|e| io("the RAS connection", e))?;
        (&mut r)
            .take(MAX_ANSWER)
            .read_to_string(&mut rest)
            .map_err(|e| io("RAS's status", e))?;
        parse(&format!("{first}\n{rest}"))
    })
}

/// A query on a thread of its own: started when a communicator without an
/// identity is first seen (`due`), its answer taken by `poll`, or waited
/// for at the end of a trace (`wait`).
#[derive(Debug)]
pub struct Asker {
    pub addr: String,
    /// At most one query per this long (`serve`); None: one per trace.
    every: Option<Duration>,
    last: Option<Instant>,
    rx: Option<mpsc::Receiver<RasQuery>>,
}

impl Asker {
    pub fn new(addr: &str, every: Option<Duration>) -> Self {
        Asker {
            addr: addr.to_string(),
            every,
            last: None,
            rx: None,
        }
    }

    /// Starts a query if none is under way, the last was long enough ago
    /// (never, for one per trace), and one is `wanted` (asked last: it
    /// looks through the traced communicators).
    pub fn due(&mut self, wanted: impl FnOnce() -> bool) {
        let again = match (self.last, self.every) {
            (None, _) => true,
            (Some(t), Some(every)) => t.elapsed() >= every,
            (Some(_), None) => false,
        };
        if !again || self.rx.is_some() || !wanted() {
            return;
        }
        self.last = Some(Instant::now());
        let (tx, rx) = mpsc::channel();
        let addr = self.addr.clone();
        let spawned = std::thread::Builder::new()
            .name("gdrtrace-nccl-ras".into())
            .spawn(move || {
                let _ = tx.send(query(&addr));
            });
        match spawned {
            Ok(_) => self.rx = Some(rx),
            Err(e) => log::warn!("NCCL's RAS not asked (no thread: {e})"),
        }
    }

    /// The answer, once it is in, with the namespace pids of `pids`
    /// (the traced processes) where they differ.
    pub fn poll(&mut self, pids: impl IntoIterator<Item = u32>) -> Option<RasQuery> {
        let q = self.rx.as_ref()?.try_recv().ok()?;
        self.rx = None;
        Some(q.with_ns_pids(pids))
    }

    /// The answer of a query under way, waited for up to its deadline.
    pub fn wait(&mut self, pids: impl IntoIterator<Item = u32>) -> Option<RasQuery> {
        let q = self.rx.as_ref()?.recv_timeout(DEADLINE + CONNECT).ok()?;
        self.rx = None;
        Some(q.with_ns_pids(pids))
    }

    /// Whether a query was started.
    pub fn asked(&self) -> bool {
        self.last.is_some()
    }
}

/// The query of a trace and what it told of the traced communicators
/// (the report's `nccl_ras`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NcclRas {
    #[serde(flatten)]
    pub query: RasQuery,
    /// Each traced communicator without an identity when the answer came,
    /// and what RAS says it is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub matches: Vec<RasMatch>,
}

impl NcclRas {
    /// What RAS said of `communicator` of `pid`, if it was asked about it.
    pub fn mapping(&self, pid: u32, communicator: &str) -> Option<&Mapping> {
        self.matches
            .iter()
            .find(|m| m.pid == pid && m.communicator == communicator)
            .map(|m| &m.mapping)
    }

    /// The communicator `comm_id` as RAS lists it.
    pub fn communicator(&self, comm_id: &str) -> Option<&RasComm> {
        match &self.query.answer {
            RasAnswer::Status(s) => s.communicators.iter().find(|c| c.hash == comm_id),
            RasAnswer::Error(_) => None,
        }
    }
}

/// A traced process's communicator without an identity, as the mapping
/// sees it: its pid as RAS lists it and its collective calls by NCCL
/// function (`AllReduce`, as RAS names them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Local {
    pub pid: u32,
    pub ns_pid: u32,
    /// The local `ncclComm_t`.
    pub communicator: String,
    pub calls: BTreeMap<String, u64>,
}

/// What RAS says a local communicator is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum Mapping {
    /// The RAS communicator with this process's pid among its ranks.
    Matched { comm_id: String, rank: u32, nranks: u32 },
    /// Several RAS communicators have this pid, and neither the process's
    /// count of communicators nor their collectives tell which is which.
    Ambiguous { candidates: Vec<String> },
    /// No RAS communicator lists this pid (another job's RAS answered, or
    /// a pid namespace RAS does not see).
    NotListed,
}

/// A local communicator and what RAS says it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RasMatch {
    pub pid: u32,
    pub communicator: String,
    #[serde(flatten)]
    pub mapping: Mapping,
}

/// Maps RAS's communicators onto the local ones by pid: a process with one
/// communicator without identity and one RAS communicator listing its pid
/// maps directly; with several, a local communicator maps to the one RAS
/// communicator whose rank (of this pid) made every kind of collective it
/// made (RAS counts since init, the tracer since it attached), and which
/// fits no other local communicator of the process; else it is ambiguous.
pub fn map(status: &RasStatus, locals: &[Local]) -> Vec<RasMatch> {
    let mut by_pid: BTreeMap<u32, Vec<&Local>> = BTreeMap::new();
    for l in locals {
        by_pid.entry(l.pid).or_default().push(l);
    }
    let mut out = Vec::new();
    for (pid, mine) in by_pid {
        let ns = mine[0].ns_pid;
        let cands: Vec<(&RasComm, &RasRank)> = status
            .communicators
            .iter()
            .filter_map(|c| Some((c, c.ranks.iter().find(|r| r.pid == i64::from(ns))?)))
            .collect();
        let fits = |l: &Local, r: &RasRank| {
            l.calls
                .iter()
                .filter(|(f, n)| **n > 0 && r.collective_counts.contains_key(*f))
                .all(|(f, _)| r.collective_counts.get(f).is_some_and(|c| *c > 0))
        };
        for l in &mine {
            let mapping = if cands.is_empty() {
                Mapping::NotListed
            } else if mine.len() == 1 && cands.len() == 1 {
                matched(cands[0])
            } else {
                let ok: Vec<&(&RasComm, &RasRank)> = cands.iter().filter(|(_, r)| fits(l, r)).collect();
                let unique = ok.len() == 1
                    && mine
                        .iter()
                        .filter(|o| o.communicator != l.communicator)
                        .all(|o| !fits(o, ok[0].1));
                if unique {
                    matched(*ok[0])
                } else {
                    Mapping::Ambiguous {
                        candidates: cands.iter().map(|(c, _)| c.hash.clone()).collect(),
                    }
                }
            };
            out.push(RasMatch {
                pid,
                communicator: l.communicator.clone(),
                mapping,
            });
        }
    }
    out
}

fn matched((c, r): (&RasComm, &RasRank)) -> Mapping {
    Mapping::Matched {
        comm_id: c.hash.clone(),
        rank: r.rank,
        nranks: c.size,
    }
}

/// The NCCL function an op of the uapi table calls (`ncclAllReduce` ->
/// `AllReduce`), as RAS counts it.
pub fn function_of(op: &str) -> &str {
    op.strip_prefix("nccl").unwrap_or(op)
}

#[cfg(test)]
mod tests;
