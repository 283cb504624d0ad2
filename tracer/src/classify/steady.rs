//! Verdicts for a communicating process seen only in its steady state: a
//! job attached after NCCL finished its set-up shows collectives but none
//! of the set-up calls that `comm::verdict` reads (peer checks, buffer
//! export/import, staging allocations). What it does show while it runs:
//! - its own socket traffic (send/recv syscalls, aggregated in the kernel):
//!   NCCL's socket transport moves every collective byte through them;
//! - its environment: `NCCL_P2P_DISABLE=1` rules P2P (and so NVLink) out;
//! - the GPUs' NVLink data counters (NVML, machine-wide): NCCL's P2P
//!   transport moves the collective bytes over NVLink when the GPUs are
//!   joined by it.
//!
//! The NVLink counters belong to the GPUs, not to a process: when another
//! job (traced or not) could have moved the bytes they show, they are not
//! this process's evidence, and the verdict is `ambiguous` unless its own
//! evidence (sockets, environment) decides. Collectives whose bytes appear
//! on neither path, on GPUs that NVLink joins and with no RDMA NIC to carry
//! them, went through host memory (NCCL's SHM transport). Everything else
//! stays `unknown`. Each verdict says that it was inferred from the steady
//! state, with the numbers.
use std::collections::BTreeMap;

use super::{
    Transport,
    comm::{self, Basis, Verdict},
};

/// A byte count is "carried" by a path when the path moved at least this
/// fraction of the collective bytes (ring all-reduce sends about 2(n-1)/n of
/// the buffer per rank; counters and syscalls see the same order).
const CARRIED: f64 = 0.10;
/// NVLink is "idle" when it moved less than this fraction.
const IDLE: f64 = 0.01;

pub use crate::counters::{GpuLinks, GpuProcess};

/// What one process showed while it ran.
#[derive(Clone, Debug, Default)]
pub struct Steady {
    pub pid: u32,
    pub comm: String,
    pub parent: Option<u32>,
    pub collective_calls: u64,
    pub collective_bytes: u64,
    /// Bytes through the process's socket send/recv syscalls.
    pub socket_bytes: u64,
    pub env: BTreeMap<String, String>,
    /// The share of its traced time its collectives were counted in, when
    /// the duty cycle sampled them (the collective figures are estimates).
    pub sampled_share: Option<f64>,
    /// Where its peers are and which networks this host offers.
    pub network: comm::Network,
}

/// Collective rows (per process, op, communicator) that moved bytes.
pub fn collectives<'a>(rows: impl Iterator<Item = (u32, &'a str, u64, u64)>, pid: u32) -> (u64, u64) {
    rows.filter(|(p, op, _, bytes)| *p == pid && super::comm::is_nccl(op) && *bytes > 0)
        .fold((0, 0), |(c, b), (_, _, calls, bytes)| (c + calls, b + bytes))
}

/// Everything a steady-state verdict is judged against: the other
/// processes of the same window and what is machine-wide.
pub struct Context<'a> {
    /// Every traced process's steady state (this one included).
    pub all: &'a [Steady],
    /// Transports already decided from set-up calls, per pid.
    pub decided: &'a BTreeMap<u32, Transport>,
    /// None when the GPU counters could not be read.
    pub links: Option<&'a GpuLinks>,
    /// RDMA NICs on the machine (host facts), where the links don't say.
    pub rdma_nics: Option<usize>,
}

impl Context<'_> {
    fn rdma_nics(&self) -> Option<usize> {
        self.links.map(|l| l.rdma_nics).or(self.rdma_nics)
    }
}

fn gb(b: u64) -> String {
    format!("{:.2} GB", b as f64 / 1e9)
}

fn who(pid: u32, comm: &str) -> String {
    if comm.is_empty() {
        format!("pid {pid}")
    } else {
        format!("pid {pid} ({comm})")
    }
}

/// The NCCL variables that choose a transport (logging ones aside, and the
/// host identity, which differs between the ranks of one job placed on
/// emulated or containerised hosts).
fn nccl_config(env: &BTreeMap<String, String>) -> Vec<(&String, &String)> {
    env.iter()
        .filter(|(k, _)| {
            k.starts_with("NCCL_") && !k.starts_with("NCCL_DEBUG") && *k != "NCCL_VERSION" && *k != "NCCL_HOSTID"
        })
        .collect()
}

/// Whether two processes are ranks of one job: started by the same parent
/// (a launcher: torch.multiprocessing, torchrun, mpirun, srun) with the same
/// NCCL configuration. Where a parent is not known (reports of attach
/// before parents were recorded), the configuration alone decides.
fn same_job(a: &Steady, b: &Steady) -> bool {
    match (a.parent, b.parent) {
        (Some(x), Some(y)) if x != y => false,
        _ => nccl_config(&a.env) == nccl_config(&b.env),
    }
}

fn socket_share(s: &Steady) -> f64 {
    s.socket_bytes as f64 / s.collective_bytes.max(1) as f64
}

fn carried_by_sockets(s: &Steady) -> bool {
    s.socket_bytes > 0 && socket_share(s) >= CARRIED
}

/// Whether NVLink, as the counters saw it, could have carried `s`'s
/// collectives: nothing of its own rules P2P out, and the counters moved
/// enough.
fn could_use_nvlink(s: &Steady, links: &GpuLinks) -> bool {
    s.collective_calls > 0
        && !carried_by_sockets(s)
        && !comm::env_set(&s.env, "NCCL_P2P_DISABLE")
        && links.nvlink_bytes as f64 / s.collective_bytes.max(1) as f64 >= CARRIED
}

/// Who else could have moved the NVLink bytes `s` would claim: other jobs
/// traced in the same window that nothing rules off NVLink (or whose set-up
/// chose P2P), and processes outside the trace that have the GPUs open.
fn rivals(s: &Steady, cx: &Context, links: &GpuLinks) -> Vec<String> {
    let mut out = Vec::new();
    for o in cx.all.iter().filter(|o| o.pid != s.pid && !same_job(s, o)) {
        let could = match cx.decided.get(&o.pid) {
            Some(t) => *t == Transport::P2pNvlink,
            None => could_use_nvlink(o, links),
        };
        if could {
            out.push(format!("{} (another job, traced)", who(o.pid, &o.comm)));
        }
    }
    for g in links.gpu_processes.iter().flatten() {
        let traced = cx.all.iter().any(|o| o.pid == g.pid);
        // A sibling outside the trace is a rank of the same job (attach to one rank).
        let sibling = g.parent.is_some() && g.parent == s.parent;
        if !traced && !sibling {
            out.push(format!("{} (not traced, has the GPUs open)", who(g.pid, &g.comm)));
        }
    }
    out
}

/// The steady-state verdict, or None when the process ran no collectives.
pub fn verdict(s: &Steady, cx: &Context) -> Option<Verdict> {
    if s.collective_calls == 0 {
        return None;
    }
    let coll = s.collective_bytes.max(1) as f64;
    let mut evidence = vec![format!(
        "inferred from the steady state (attached after set-up): {} collective calls moved {}{}",
        s.collective_calls,
        gb(s.collective_bytes),
        s.sampled_share.map_or(String::new(), |share| format!(
            " (estimated from {:.1}% of its traced time: the collectives were duty-cycled)",
            share * 100.0
        ))
    )];
    let nics = cx.rdma_nics();
    let p2p_off = comm::env_set(&s.env, "NCCL_P2P_DISABLE");
    let transport = if carried_by_sockets(s) {
        evidence.push(format!(
            "its send/recv syscalls on sockets moved {} ({:.0}% of the collective bytes): NCCL NET/Socket through host memory",
            gb(s.socket_bytes),
            socket_share(s) * 100.0
        ));
        Transport::Socket
    } else if p2p_off {
        // Its own environment rules P2P out: whatever NVLink moved was not its.
        let shm_off = comm::env_set(&s.env, "NCCL_SHM_DISABLE");
        match nics {
            Some(0) if !shm_off => {
                evidence.push(format!(
                    "NCCL_P2P_DISABLE=1 in its environment rules P2P (and NVLink) out, its sockets moved {} ({:.1}% of the collective bytes) and no RDMA NIC exists: the bytes went through host memory (NCCL SHM)",
                    gb(s.socket_bytes),
                    socket_share(s) * 100.0
                ));
                Transport::Shm
            }
            Some(0) => {
                evidence.push(format!(
                    "NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1 leave only the socket transport, yet its sockets moved {}: not enough to decide (socket probes missing?)",
                    gb(s.socket_bytes)
                ));
                Transport::Unknown
            }
            n => {
                evidence.push(format!(
                    "NCCL_P2P_DISABLE=1 rules P2P out and its sockets moved {}, but {}: NET/IB and SHM look alike from here",
                    gb(s.socket_bytes),
                    match n {
                        Some(n) => format!("{n} RDMA NIC(s) exist"),
                        None => "whether an RDMA NIC exists is unknown".into(),
                    }
                ));
                Transport::Unknown
            }
        }
    } else {
        match cx.links {
            Some(l) if l.nvlink_bytes as f64 / coll >= CARRIED => {
                let rivals = rivals(s, cx, l);
                let seen = format!(
                    "NVLink data counters of the GPUs moved {} in the same window ({:.0}% of the collective bytes), socket traffic {}",
                    gb(l.nvlink_bytes),
                    l.nvlink_bytes as f64 * 100.0 / coll,
                    gb(s.socket_bytes)
                );
                if rivals.is_empty() {
                    evidence.push(seen);
                    Transport::P2pNvlink
                } else {
                    evidence.push(seen);
                    evidence.push(format!(
                        "the counters belong to the GPUs, not to processes, and {} could have moved those bytes: they are not this process's evidence",
                        rivals.join(", ")
                    ));
                    evidence.push(if l.nvlink_between_gpus && nics == Some(0) {
                        "p2p/nvlink or shm: nothing of its own (socket bytes, NCCL_P2P_DISABLE) decides".into()
                    } else {
                        "p2p/nvlink or another transport: nothing of its own (socket bytes, NCCL_P2P_DISABLE) decides"
                            .into()
                    });
                    Transport::Ambiguous
                }
            }
            Some(l) if l.nvlink_between_gpus && nics == Some(0) && (l.nvlink_bytes as f64 / coll) < IDLE => {
                // Idle relative to its own bytes: true whoever else shares the GPUs.
                evidence.push(format!(
                    "the GPUs are joined by NVLink, yet NVLink moved {} ({:.2}% of the collective bytes), sockets {}, and no RDMA NIC exists: the bytes went through host memory (NCCL SHM)",
                    gb(l.nvlink_bytes),
                    l.nvlink_bytes as f64 * 100.0 / coll,
                    gb(s.socket_bytes)
                ));
                Transport::Shm
            }
            Some(l) => {
                evidence.push(format!(
                    "NVLink moved {} and sockets {}: not enough to decide (NVLink between GPUs: {}, RDMA NICs: {})",
                    gb(l.nvlink_bytes),
                    gb(s.socket_bytes),
                    l.nvlink_between_gpus,
                    l.rdma_nics
                ));
                Transport::Unknown
            }
            None => {
                evidence.push(format!(
                    "sockets moved {} and GPU link counters are unavailable (no NVML): not enough to decide",
                    gb(s.socket_bytes)
                ));
                Transport::Unknown
            }
        }
    };
    if comm::Net::of(transport).is_some()
        && let Some(why) = &s.network.other_hosts
    {
        evidence.push(why.clone());
    }
    Some(Verdict {
        pid: s.pid,
        comm: s.comm.clone(),
        transport,
        host_staged: transport.staged(),
        basis: Basis::SteadyState,
        evidence,
        cause: comm::cause(&s.env, transport, &s.network),
        cause_kind: comm::cause_kind(&s.env, transport, &s.network),
        nccl_log: None,
        net: comm::Net::of_evidence(transport, &s.env),
        other_hosts: s.network.other_hosts.clone(),
        paths: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(coll: u64, sock: u64, env: &[(&str, &str)]) -> Steady {
        Steady {
            pid: 9,
            comm: "rank".into(),
            parent: Some(1),
            collective_calls: 100,
            collective_bytes: coll,
            socket_bytes: sock,
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            sampled_share: None,
            network: Default::default(),
        }
    }

    const NV: GpuLinks = GpuLinks {
        nvlink_between_gpus: true,
        nvlink_bytes: 0,
        rdma_nics: 0,
        gpu_processes: None,
    };

    /// The verdict of `s` alone in its window.
    fn alone(s: &Steady, links: Option<GpuLinks>) -> Verdict {
        judge(std::slice::from_ref(s), &BTreeMap::new(), links, None).remove(0)
    }

    fn judge(
        all: &[Steady],
        decided: &BTreeMap<u32, Transport>,
        links: Option<GpuLinks>,
        nics: Option<usize>,
    ) -> Vec<Verdict> {
        let cx = Context {
            all,
            decided,
            links: links.as_ref(),
            rdma_nics: nics,
        };
        all.iter().filter_map(|s| verdict(s, &cx)).collect()
    }

    #[test]
    fn socket_mode() {
        let v = alone(
            &st(
                1 << 30,
                1 << 30,
                &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")],
            ),
            Some(NV),
        );
        assert_eq!((v.transport, v.basis), (Transport::Socket, Basis::SteadyState));
        assert!(v.host_staged);
        assert!(v.cause.unwrap().contains("NCCL_SHM_DISABLE=1"));
    }

    #[test]
    fn p2p_and_shm_from_nvlink_counters() {
        let busy = GpuLinks {
            nvlink_bytes: 2 << 30,
            ..NV
        };
        let v = alone(&st(1 << 30, 4096, &[]), Some(busy));
        assert_eq!(v.transport, Transport::P2pNvlink);
        assert!(!v.host_staged && v.cause.is_none());
        let idle = GpuLinks {
            nvlink_bytes: 1 << 20,
            ..NV
        };
        let v = alone(&st(1 << 30, 4096, &[]), Some(idle));
        assert_eq!(v.transport, Transport::Shm);
        assert!(v.cause.unwrap().contains("no NCCL_*_DISABLE"));
    }

    /// NCCL_P2P_DISABLE decides without the counters (none on this host),
    /// as long as no RDMA NIC could carry NET/IB.
    #[test]
    fn p2p_disabled_by_the_environment() {
        let s = st(1 << 30, 4096, &[("NCCL_P2P_DISABLE", "1")]);
        let v = judge(std::slice::from_ref(&s), &BTreeMap::new(), None, Some(0)).remove(0);
        assert_eq!(v.transport, Transport::Shm, "{v:?}");
        assert!(v.cause.unwrap().contains("NCCL_P2P_DISABLE=1"));
        let v = judge(std::slice::from_ref(&s), &BTreeMap::new(), None, Some(1)).remove(0);
        assert_eq!(v.transport, Transport::Unknown, "a NIC could carry NET/IB: {v:?}");
        let v = judge(std::slice::from_ref(&s), &BTreeMap::new(), None, None).remove(0);
        assert_eq!(v.transport, Transport::Unknown, "NICs unknown: {v:?}");
        // Busy NVLink is somebody else's: the environment rules P2P out.
        let busy = GpuLinks {
            nvlink_bytes: 4 << 30,
            ..NV
        };
        assert_eq!(alone(&s, Some(busy)).transport, Transport::Shm);
    }

    /// Two jobs on the same GPUs (issue 12): one over NVLink, one on SHM.
    #[test]
    fn jobs_sharing_the_gpus() {
        let busy = GpuLinks {
            nvlink_bytes: 6 << 30,
            ..NV
        };
        let rank = |pid, parent, env: &[(&str, &str)]| Steady {
            pid,
            parent: Some(parent),
            ..st(1 << 30, 0, env)
        };
        // SHM forced by the environment: its own evidence decides it, and
        // the P2P job is then the only one the counters can be about.
        let all = [
            rank(11, 10, &[]),
            rank(12, 10, &[]),
            rank(21, 20, &[("NCCL_P2P_DISABLE", "1")]),
            rank(22, 20, &[("NCCL_P2P_DISABLE", "1")]),
        ];
        let v = judge(&all, &BTreeMap::new(), Some(busy.clone()), None);
        let t: Vec<_> = v.iter().map(|v| v.transport.name()).collect();
        assert_eq!(t, ["p2p/nvlink", "p2p/nvlink", "shm", "shm"], "{v:#?}");

        // SHM chosen by something the tracer cannot see (an nccl.conf, a
        // topology file): both jobs could be on NVLink, neither is labelled.
        let all = [
            rank(11, 10, &[]),
            rank(12, 10, &[]),
            rank(21, 20, &[("NCCL_TOPO_FILE", "/etc/topo.xml")]),
            rank(22, 20, &[("NCCL_TOPO_FILE", "/etc/topo.xml")]),
        ];
        let v = judge(&all, &BTreeMap::new(), Some(busy.clone()), None);
        assert!(v.iter().all(|v| v.transport == Transport::Ambiguous), "{v:#?}");
        assert!(
            v[0].evidence
                .iter()
                .any(|e| e.contains("pid 21 (rank) (another job, traced)")),
            "{:?}",
            v[0].evidence
        );
        assert!(v.iter().all(|v| !v.host_staged && v.cause.is_none()));

        // The other job's own sockets decide it: the counters are this one's.
        let all = [
            rank(11, 10, &[]),
            Steady {
                socket_bytes: 1 << 30,
                ..rank(21, 20, &[])
            },
        ];
        let v = judge(&all, &BTreeMap::new(), Some(busy.clone()), None);
        let t: Vec<_> = v.iter().map(|v| v.transport.name()).collect();
        assert_eq!(t, ["p2p/nvlink", "socket"]);

        // A job whose set-up was seen choosing P2P is a rival too.
        let all = [rank(11, 10, &[]), rank(21, 20, &[])];
        let decided = BTreeMap::from([(21, Transport::P2pNvlink)]);
        let v = judge(&all[..1], &decided, Some(busy.clone()), None);
        assert_eq!(v[0].transport, Transport::P2pNvlink, "not in `all`: not a rival");
        let v = judge(&all, &decided, Some(busy.clone()), None);
        assert_eq!(v[0].transport, Transport::Ambiguous, "{v:#?}");

        // Idle NVLink is idle for everyone: SHM whoever shares the GPUs.
        let idle = GpuLinks {
            nvlink_bytes: 1 << 20,
            ..NV
        };
        let all = [rank(11, 10, &[]), rank(21, 20, &[])];
        let v = judge(&all, &BTreeMap::new(), Some(idle), None);
        assert!(v.iter().all(|v| v.transport == Transport::Shm), "{v:#?}");
    }

    /// A process outside the trace with the GPUs open makes the counters
    /// ambiguous, unless it is a sibling rank of the same job.
    #[test]
    fn untraced_gpu_processes() {
        let with = |procs: Vec<GpuProcess>| GpuLinks {
            nvlink_bytes: 6 << 30,
            gpu_processes: Some(procs),
            ..NV
        };
        let me = st(1 << 30, 0, &[]);
        let other = |pid, parent| GpuProcess {
            pid,
            parent: Some(parent),
            comm: "python3".into(),
        };
        assert_eq!(
            alone(&me, Some(with(vec![other(9, 1), other(5, 1)]))).transport,
            Transport::P2pNvlink,
            "itself and a sibling rank"
        );
        let v = alone(&me, Some(with(vec![other(9, 1), other(77, 70)])));
        assert_eq!(v.transport, Transport::Ambiguous);
        assert!(
            v.evidence.iter().any(|e| e.contains("pid 77 (python3) (not traced")),
            "{v:?}"
        );
    }

    /// Real attach reports from 2×H200 (tests/fixtures/reports/
    /// gpu-h200-attach-*.json, trimmed): the steady state of each transport
    /// mode decides the mode, rank by rank, through the one judging function.
    #[test]
    fn h200_attach_reports() {
        for (mode, want) in [("auto", "p2p/nvlink"), ("no-p2p", "shm"), ("no-p2p-no-shm", "socket")] {
            let path = format!(
                "{}/../tests/fixtures/reports/gpu-h200-attach-{mode}.json",
                env!("CARGO_MANIFEST_DIR")
            );
            let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let inputs: crate::judge::Inputs = serde_json::from_value(r.clone()).unwrap();
            let vs = crate::judge::verdicts(&inputs);
            assert_eq!(vs.len(), 2, "{mode}: both ranks judged: {vs:?}");
            for v in &vs {
                assert_eq!(v.transport.name(), want, "{mode} pid {}: {v:?}", v.pid);
                assert_eq!(v.basis, Basis::SteadyState);
                if want != "p2p/nvlink" {
                    let var = if want == "shm" {
                        "NCCL_P2P_DISABLE"
                    } else {
                        "NCCL_SHM_DISABLE"
                    };
                    assert!(v.cause.as_deref().unwrap().contains(var), "{mode}: {v:?}");
                }
            }
            // The live run's verdicts and first interval said the same.
            let carried: Vec<crate::classify::comm::Verdict> = serde_json::from_value(r["verdicts"].clone()).unwrap();
            let t = |v: &[crate::classify::comm::Verdict]| v.iter().map(|v| (v.pid, v.transport)).collect::<Vec<_>>();
            assert_eq!(t(&vs), t(&carried), "{mode}");
            let first = r["first_interval"]["processes"].as_array().unwrap();
            let live: Vec<&str> = first.iter().filter_map(|p| p["verdict"].as_str()).collect();
            assert_eq!(live, [want, want], "{mode}: first interval");
        }
    }

    #[test]
    fn undecidable_stays_unknown() {
        // Idle NVLink but a NIC exists: NET/IB could carry the bytes.
        let nic = GpuLinks { rdma_nics: 1, ..NV };
        assert_eq!(alone(&st(1 << 30, 0, &[]), Some(nic)).transport, Transport::Unknown);
        // GPUs without NVLink: P2P over PCIe and SHM look alike here.
        let pcie = GpuLinks {
            nvlink_between_gpus: false,
            ..NV
        };
        assert_eq!(alone(&st(1 << 30, 0, &[]), Some(pcie)).transport, Transport::Unknown);
        // No counters at all.
        assert_eq!(alone(&st(1 << 30, 0, &[]), None).transport, Transport::Unknown);
        // Some NVLink traffic, but between the thresholds.
        let some = GpuLinks {
            nvlink_bytes: 50 << 20,
            ..NV
        };
        assert_eq!(alone(&st(1 << 30, 0, &[]), Some(some)).transport, Transport::Unknown);
        // No collectives: no verdict.
        let mut s = st(0, 1 << 30, &[]);
        s.collective_calls = 0;
        let cx = Context {
            all: &[],
            decided: &BTreeMap::new(),
            links: Some(&NV),
            rdma_nics: None,
        };
        assert!(verdict(&s, &cx).is_none());
    }
}
