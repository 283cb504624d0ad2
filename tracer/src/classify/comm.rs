//! Per-process communication verdicts from evidence, for NCCL jobs (and any
//! process that moves GPU data between processes): which transport carried
//! its collectives, why, and what forced a fallback. NCCL decides its
//! transport once per channel at set-up; the driver calls it makes for that
//! set-up are the evidence (measured with NCCL 2.28 on 2×H200, see
//! docs/validation/):
//! - P2P/CUMEM: `cuDeviceCanAccessPeer` succeeds and peer buffers are
//!   imported (`cuMemImportFromShareableHandle` / `cuIpcOpenMemHandle`);
//! - SHM (NCCL_P2P_DISABLE=1): buffers exported and imported, but no peer
//!   access check: the shared buffers live in host memory;
//! - Socket (+NCCL_SHM_DISABLE=1): no export/import at all, pinned host
//!   staging buffers from `cuMemHostAlloc`.
//!
//! NCCL's own log (`NCCL_DEBUG=INFO`) corroborates when present; it is never
//! the only source of a verdict.
use std::collections::BTreeMap;

use serde::Serialize;

use super::Transport;

/// What the probes saw of one process.
#[derive(Clone, Debug, Default)]
pub struct Evidence {
    pub pid: u32,
    pub comm: String,
    pub calls: BTreeMap<String, u64>,
    /// NCCL_* variables of the process environment.
    pub env: BTreeMap<String, String>,
    /// Whether any NVLink joins the local GPUs (from `topo`).
    pub nvlink: Option<bool>,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Verdict {
    pub pid: u32,
    pub comm: String,
    pub transport: Transport,
    pub host_staged: bool,
    pub evidence: Vec<String>,
    /// Why a fallback happened (an environment variable that forced it), if known.
    pub cause: Option<String>,
    /// NCCL's own log: its transport for this process, and whether it agrees.
    pub nccl_log: Option<LogAgreement>,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct LogAgreement {
    pub nccl_says: String,
    pub agrees: bool,
}

fn n(e: &Evidence, op: &str) -> u64 {
    e.calls.get(op).copied().unwrap_or(0)
}

fn env_set(env: &BTreeMap<String, String>, k: &str) -> bool {
    env.get(k).is_some_and(|v| v != "0" && !v.is_empty())
}

/// Why a process ended on a host-staged transport, from its environment.
pub fn cause(env: &BTreeMap<String, String>, transport: Transport) -> Option<String> {
    match transport {
        Transport::Shm if env_set(env, "NCCL_P2P_DISABLE") => {
            Some("NCCL_P2P_DISABLE=1 in the process environment disabled P2P: NCCL fell back to shared memory through the host".into())
        }
        Transport::Socket if env_set(env, "NCCL_SHM_DISABLE") && env_set(env, "NCCL_P2P_DISABLE") => Some(
            "NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1 in the process environment: NCCL fell back to the socket transport through host memory".into(),
        ),
        Transport::Socket if env_set(env, "NCCL_SHM_DISABLE") => {
            Some("NCCL_SHM_DISABLE=1 in the process environment, and P2P was not possible".into())
        }
        Transport::Shm | Transport::Socket => Some("no NCCL_*_DISABLE variable set: P2P was not possible between these GPUs (check topology, ACS/IOMMU, driver)".into()),
        _ => None,
    }
}

/// The verdict for one process, or None when it shows no GPU communication.
pub fn verdict(e: &Evidence) -> Option<Verdict> {
    let nccl = e.calls.keys().any(|k| k.starts_with("nccl"));
    let peer = n(e, "cuDeviceCanAccessPeer");
    let import = n(e, "cuMemImportFromShareableHandle") + n(e, "cuIpcOpenMemHandle");
    let export = n(e, "cuMemExportToShareableHandle") + n(e, "cuIpcGetMemHandle");
    let host_alloc = n(e, "cuMemHostAlloc") + n(e, "cuMemAllocHost");
    if !nccl && import == 0 && export == 0 {
        return None;
    }
    let mut evidence = Vec::new();
    let (transport, staged) = if peer > 0 && import > 0 {
        evidence.push(format!(
            "cuDeviceCanAccessPeer x{peer} and {import} peer buffer imports (cuMemImportFromShareableHandle/cuIpcOpenMemHandle): GPU memory of the peer is mapped into this process"
        ));
        match e.nvlink {
            Some(true) => {
                evidence.push("the GPUs are joined by NVLink (topology)".into());
                (Transport::P2pNvlink, false)
            }
            Some(false) => (Transport::P2pPcie, false),
            None => (Transport::P2pNvlink, false),
        }
    } else if import > 0 || export > 0 {
        evidence.push(format!(
            "{export} exports and {import} imports of shareable buffers but no peer-access check: the shared buffers are host memory (NCCL SHM transport)"
        ));
        (Transport::Shm, true)
    } else if nccl && host_alloc > 0 {
        evidence.push(format!(
            "no buffer export/import, {host_alloc} pinned host staging buffers (cuMemHostAlloc/cuMemAllocHost): data goes GPU -> host -> socket (NCCL NET/Socket)"
        ));
        (Transport::Socket, true)
    } else {
        evidence.push("NCCL calls seen, but no buffer set-up evidence (attached after set-up?)".into());
        (Transport::Unknown, false)
    };
    let cause = cause(&e.env, transport);
    Some(Verdict {
        pid: e.pid,
        comm: e.comm.clone(),
        transport,
        host_staged: staged,
        evidence,
        cause,
        nccl_log: None,
    })
}

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
    } else if via.starts_with("NET/Socket") {
        Transport::Socket
    } else if via.starts_with("NET/IB") && via.contains("GDRDMA") {
        Transport::GdrPeerMem
    } else if via.starts_with("NET/IB") {
        Transport::HostStaged
    } else {
        Transport::Unknown
    }
}

/// Attaches NCCL's log view to each verdict and says whether they agree.
pub fn corroborate(verdicts: &mut [Verdict], log: &BTreeMap<u32, Vec<String>>) {
    for v in verdicts {
        let Some(vias) = log.get(&v.pid) else { continue };
        let agrees = vias.iter().all(|via| {
            let t = transport_of_via(via);
            t == v.transport || (t == Transport::P2pNvlink && v.transport == Transport::P2pPcie)
        });
        v.nccl_log = Some(LogAgreement {
            nccl_says: vias.join(", "),
            agrees,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(calls: &[(&str, u64)], env: &[(&str, &str)]) -> Evidence {
        Evidence {
            pid: 7,
            comm: "rank0".into(),
            calls: calls.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            nvlink: Some(true),
        }
    }

    // Counts as measured with NCCL 2.28 on 2xH200 (ENVIRONMENT notes).
    #[test]
    fn nccl_modes() {
        let auto = ev(
            &[
                ("ncclCommInitRank", 1),
                ("cuDeviceCanAccessPeer", 104),
                ("cuMemExportToShareableHandle", 96),
                ("cuMemImportFromShareableHandle", 96),
            ],
            &[],
        );
        let v = verdict(&auto).unwrap();
        assert_eq!(v.transport, Transport::P2pNvlink);
        assert!(!v.host_staged && v.cause.is_none());

        let shm = ev(
            &[
                ("ncclCommInitRank", 1),
                ("cuMemExportToShareableHandle", 16),
                ("cuMemImportFromShareableHandle", 16),
            ],
            &[("NCCL_P2P_DISABLE", "1")],
        );
        let v = verdict(&shm).unwrap();
        assert_eq!(v.transport, Transport::Shm);
        assert!(v.host_staged);
        assert!(v.cause.as_deref().unwrap().contains("NCCL_P2P_DISABLE=1"));

        let sock = ev(
            &[("ncclCommInitRank", 1), ("cuMemHostAlloc", 16)],
            &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")],
        );
        let v = verdict(&sock).unwrap();
        assert_eq!(v.transport, Transport::Socket);
        assert!(v.cause.as_deref().unwrap().contains("NCCL_SHM_DISABLE=1"));

        assert!(verdict(&ev(&[("cuMemAlloc", 3)], &[])).is_none());
    }

    #[test]
    fn log_lines_and_agreement() {
        let log = "h:4242:4300 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n\
                   h:4243:4301 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via SHM/direct/direct\n\
                   h:4244:4302 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0\n\
                   h:4245:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/2/GDRDMA\n";
        let m = parse_nccl_log(log);
        assert_eq!(m[&4242], vec!["P2P/CUMEM"]);
        assert_eq!(transport_of_via(&m[&4243][0]), Transport::Shm);
        assert_eq!(transport_of_via(&m[&4244][0]), Transport::Socket);
        assert_eq!(transport_of_via(&m[&4245][0]), Transport::GdrPeerMem);
        let mut v = vec![Verdict {
            pid: 4243,
            comm: String::new(),
            transport: Transport::P2pNvlink,
            host_staged: false,
            evidence: vec![],
            cause: None,
            nccl_log: None,
        }];
        corroborate(&mut v, &m);
        assert_eq!(v[0].nccl_log.as_ref().unwrap().agrees, false);
    }
}
