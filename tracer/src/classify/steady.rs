//! Verdicts for a communicating process seen only in its steady state: a
//! job attached after NCCL finished its set-up shows collectives but none
//! of the set-up calls that `comm::verdict` reads (peer checks, buffer
//! export/import, staging allocations). What it does show while it runs:
//! - its own socket traffic (send/recv syscalls, aggregated in the kernel):
//!   NCCL's socket transport moves every collective byte through them;
//! - the GPUs' NVLink data counters (NVML, machine-wide): NCCL's P2P
//!   transport moves the collective bytes over NVLink when the GPUs are
//!   joined by it.
//!
//! Collectives whose bytes appear on neither, on GPUs that NVLink joins and
//! with no RDMA NIC to carry them, went through host memory (NCCL's SHM
//! transport). Everything else stays `unknown`. Each verdict says that it
//! was inferred from the steady state, with the numbers.
use std::collections::BTreeMap;

use super::{
    Transport,
    comm::{self, Verdict},
};

/// A byte count is "carried" by a path when the path moved at least this
/// fraction of the collective bytes (ring all-reduce sends about 2(n-1)/n of
/// the buffer per rank; counters and syscalls see the same order).
const CARRIED: f64 = 0.10;
/// NVLink is "idle" when it moved less than this fraction.
const IDLE: f64 = 0.01;

/// GPU interconnect traffic over the traced window (machine-wide).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GpuLinks {
    /// Whether NVLink joins the local GPUs (topology).
    pub nvlink_between_gpus: bool,
    /// NVLink data bytes (tx, summed over GPUs and links) in the window.
    pub nvlink_bytes: u64,
    /// RDMA NICs on the machine (a NIC could carry collectives over PCIe).
    pub rdma_nics: usize,
}

/// What one process showed while it ran.
#[derive(Clone, Debug, Default)]
pub struct Steady {
    pub pid: u32,
    pub comm: String,
    pub collective_calls: u64,
    pub collective_bytes: u64,
    /// Bytes through the process's socket send/recv syscalls.
    pub socket_bytes: u64,
    pub env: BTreeMap<String, String>,
    /// None when the GPU counters could not be read.
    pub links: Option<GpuLinks>,
}

/// Collective rows (per process, op, communicator) that moved bytes.
fn collectives<'a>(rows: impl Iterator<Item = (u32, &'a str, u64, u64)>, pid: u32) -> (u64, u64) {
    rows.filter(|(p, op, _, bytes)| *p == pid && op.starts_with("nccl") && *bytes > 0)
        .fold((0, 0), |(c, b), (_, _, calls, bytes)| (c + calls, b + bytes))
}

/// A process's steady-state evidence from a saved report.
pub fn from_report(r: &crate::report::Report, p: &crate::report::Process) -> Steady {
    let (calls, bytes) = collectives(
        r.collectives.iter().map(|c| (c.pid, c.op.as_str(), c.calls, c.bytes)),
        p.pid,
    );
    Steady {
        pid: p.pid,
        comm: p.comm.clone(),
        collective_calls: calls,
        collective_bytes: bytes,
        socket_bytes: p.socket.bytes_sent + p.socket.bytes_received,
        env: p.env.clone(),
        links: r.gpu_links,
    }
}

/// A process's steady-state evidence so far, from the live aggregator.
pub fn from_aggregator(agg: &crate::stats::Aggregator, pid: u32, links: Option<GpuLinks>) -> Option<Steady> {
    let p = agg.procs.get(&pid)?;
    let (calls, bytes) = collectives(
        agg.collectives
            .iter()
            .map(|((pid, op, _), (calls, bytes))| (*pid, op.as_str(), *calls, *bytes)),
        pid,
    );
    Some(Steady {
        pid,
        comm: p.comm.clone(),
        collective_calls: calls,
        collective_bytes: bytes,
        socket_bytes: p.socket.bytes_sent + p.socket.bytes_received,
        env: p.env.clone(),
        links,
    })
}

fn gb(b: u64) -> String {
    format!("{:.2} GB", b as f64 / 1e9)
}

/// The steady-state verdict, or None when the process ran no collectives.
pub fn verdict(s: &Steady) -> Option<Verdict> {
    if s.collective_calls == 0 {
        return None;
    }
    let coll = s.collective_bytes.max(1) as f64;
    let mut evidence = vec![format!(
        "inferred from the steady state (attached after set-up): {} collective calls moved {}",
        s.collective_calls,
        gb(s.collective_bytes)
    )];
    let socket = s.socket_bytes as f64 / coll;
    let transport = if s.socket_bytes > 0 && socket >= CARRIED {
        evidence.push(format!(
            "its send/recv syscalls on sockets moved {} ({:.0}% of the collective bytes): NCCL NET/Socket through host memory",
            gb(s.socket_bytes),
            socket * 100.0
        ));
        Transport::Socket
    } else {
        match s.links {
            Some(l) if l.nvlink_bytes as f64 / coll >= CARRIED => {
                evidence.push(format!(
                    "NVLink data counters of the GPUs moved {} in the same window ({:.0}% of the collective bytes), socket traffic {}",
                    gb(l.nvlink_bytes),
                    l.nvlink_bytes as f64 * 100.0 / coll,
                    gb(s.socket_bytes)
                ));
                Transport::P2pNvlink
            }
            Some(l) if l.nvlink_between_gpus && l.rdma_nics == 0 && (l.nvlink_bytes as f64 / coll) < IDLE => {
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
    let host_staged = matches!(transport, Transport::Shm | Transport::Socket);
    Some(Verdict {
        pid: s.pid,
        comm: s.comm.clone(),
        transport,
        host_staged,
        evidence,
        cause: comm::cause(&s.env, transport),
        nccl_log: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(coll: u64, sock: u64, links: Option<GpuLinks>, env: &[(&str, &str)]) -> Steady {
        Steady {
            pid: 9,
            comm: "rank".into(),
            collective_calls: 100,
            collective_bytes: coll,
            socket_bytes: sock,
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            links,
        }
    }

    const NV: GpuLinks = GpuLinks {
        nvlink_between_gpus: true,
        nvlink_bytes: 0,
        rdma_nics: 0,
    };

    #[test]
    fn socket_mode() {
        let v = verdict(&st(
            1 << 30,
            1 << 30,
            Some(NV),
            &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")],
        ))
        .unwrap();
        assert_eq!(v.transport, Transport::Socket);
        assert!(v.host_staged);
        assert!(v.cause.unwrap().contains("NCCL_SHM_DISABLE=1"));
    }

    #[test]
    fn p2p_and_shm_from_nvlink_counters() {
        let busy = GpuLinks {
            nvlink_bytes: 2 << 30,
            ..NV
        };
        let v = verdict(&st(1 << 30, 4096, Some(busy), &[])).unwrap();
        assert_eq!(v.transport, Transport::P2pNvlink);
        assert!(!v.host_staged && v.cause.is_none());
        let idle = GpuLinks {
            nvlink_bytes: 1 << 20,
            ..NV
        };
        let v = verdict(&st(1 << 30, 4096, Some(idle), &[("NCCL_P2P_DISABLE", "1")])).unwrap();
        assert_eq!(v.transport, Transport::Shm);
        assert!(v.cause.unwrap().contains("NCCL_P2P_DISABLE=1"));
    }

    /// Real attach reports from 2×H200 (tests/fixtures/reports/
    /// gpu-h200-attach-*.json): the steady state of each transport mode
    /// decides the mode, rank by rank.
    #[test]
    fn h200_attach_reports() {
        for (mode, want) in [("auto", "p2p/nvlink"), ("no-p2p", "shm"), ("no-p2p-no-shm", "socket")] {
            let path = format!(
                "{}/../tests/fixtures/reports/gpu-h200-attach-{mode}.json",
                env!("CARGO_MANIFEST_DIR")
            );
            let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let links: GpuLinks = serde_json::from_value(r["gpu_links"].clone()).unwrap();
            let rows: Vec<(u32, String, u64, u64)> = r["collectives"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| {
                    (
                        c["pid"].as_u64().unwrap() as u32,
                        c["op"].as_str().unwrap().to_string(),
                        c["calls"].as_u64().unwrap(),
                        c["bytes"].as_u64().unwrap(),
                    )
                })
                .collect();
            let mut ranks = 0;
            for p in r["processes"].as_array().unwrap() {
                let pid = p["pid"].as_u64().unwrap() as u32;
                let (calls, bytes) = collectives(rows.iter().map(|(p, o, c, b)| (*p, o.as_str(), *c, *b)), pid);
                let s = Steady {
                    pid,
                    comm: p["comm"].as_str().unwrap().into(),
                    collective_calls: calls,
                    collective_bytes: bytes,
                    socket_bytes: p["socket"]["bytes_sent"].as_u64().unwrap()
                        + p["socket"]["bytes_received"].as_u64().unwrap(),
                    env: serde_json::from_value(p["env"].clone()).unwrap(),
                    links: Some(links),
                };
                let Some(v) = verdict(&s) else { continue };
                ranks += 1;
                assert_eq!(v.transport.name(), want, "{mode} pid {pid}: {v:?}");
                if want != "p2p/nvlink" {
                    let var = if want == "shm" {
                        "NCCL_P2P_DISABLE"
                    } else {
                        "NCCL_SHM_DISABLE"
                    };
                    assert!(v.cause.as_deref().unwrap().contains(var), "{mode}: {v:?}");
                }
            }
            assert_eq!(ranks, 2, "{mode}: both ranks judged");
            // The live run's first interval already said the same.
            let first = r["first_interval"]["processes"].as_array().unwrap();
            let live: Vec<&str> = first.iter().filter_map(|p| p["verdict"].as_str()).collect();
            assert_eq!(live, [want, want], "{mode}: first interval");
        }
    }

    #[test]
    fn undecidable_stays_unknown() {
        // Idle NVLink but a NIC exists: NET/IB could carry the bytes.
        let nic = GpuLinks { rdma_nics: 1, ..NV };
        assert_eq!(
            verdict(&st(1 << 30, 0, Some(nic), &[])).unwrap().transport,
            Transport::Unknown
        );
        // GPUs without NVLink: P2P over PCIe and SHM look alike here.
        let pcie = GpuLinks {
            nvlink_between_gpus: false,
            ..NV
        };
        assert_eq!(
            verdict(&st(1 << 30, 0, Some(pcie), &[])).unwrap().transport,
            Transport::Unknown
        );
        // No counters at all.
        assert_eq!(
            verdict(&st(1 << 30, 0, None, &[])).unwrap().transport,
            Transport::Unknown
        );
        // Some NVLink traffic, but between the thresholds.
        let some = GpuLinks {
            nvlink_bytes: 50 << 20,
            ..NV
        };
        assert_eq!(
            verdict(&st(1 << 30, 0, Some(some), &[])).unwrap().transport,
            Transport::Unknown
        );
        // No collectives: no verdict.
        let mut s = st(0, 1 << 30, Some(NV), &[]);
        s.collective_calls = 0;
        assert!(verdict(&s).is_none());
    }
}
