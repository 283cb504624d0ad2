//! UCX's own log, as corroboration of the UCX paths (`--ucx-log`), like
//! NCCL's log for NCCL: it never decides a verdict. Two kinds of lines say
//! which transport UCX chose, both printed at set-up:
//! - with `UCX_LOG_LEVEL=info`, one line per endpoint configuration with its
//!   lanes (`ep_cfg[0]: tag(tcp/lo tcp/eth0)` in 1.13,
//!   `0x30e3070 intra-node cfg#5 tag(sysv/memory cuda_ipc/cuda)` later);
//! - with `UCX_PROTO_INFO=y` (protocol selection v2, the default from 1.16),
//!   a table per endpoint configuration, operation and memory type:
//!
//! ```text
//! [ts] [host:pid:tid]   | ucp_context_0 intra-node cfg#1 | tagged message by ucp_tag_send* from cuda/GPU0 |
//! [ts] [host:pid:tid]   |                     0..514 | eager short                           | cuda_copy/cuda |
//! [ts] [host:pid:tid]   |                   515..inf | rendezvous zero-copy read from remote | cuda_ipc/cuda  |
//! ```
//!
//! The row that reaches `inf` is the bulk protocol. Formats: openucx/ucx
//! `src/ucp/proto/proto_debug.c` and `ucp_worker.c` (PR #7950, #8699);
//! sample lines from openucx/ucx #11865 and ai-dynamo/nixl #1195.
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{
    Transport,
    path::{Agreement, OpClass, Path, PeerKind},
};

/// One protocol UCX selected for its largest messages.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Protocol {
    /// The endpoint configuration (`ucp_context_0 intra-node cfg#1`).
    pub config: String,
    /// The operation (`tagged message by ucp_tag_send* from cuda/GPU0`).
    pub operation: String,
    /// The local memory type (`host`, `cuda`, ...).
    pub memory: String,
    /// The size range (`515..inf`), the protocol and its transports.
    pub range: String,
    pub protocol: String,
    pub transports: String,
    /// The path class it stands for (`p2p`, `host-staged`, `socket`, ...).
    pub class: String,
}

/// What UCX's log says about one process.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct LogProcess {
    pub pid: u32,
    /// `Version 1.22.0 (loaded from ...)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The `UCX_*` variables UCX says were set.
    #[serde(default)]
    pub env: Vec<String>,
    /// Endpoint configurations with their lanes (`intra-node cfg#2 tag(tcp/lo)`).
    #[serde(default)]
    pub ep_configs: Vec<String>,
    /// Bulk protocols (UCX_PROTO_INFO).
    #[serde(default)]
    pub protocols: Vec<Protocol>,
    /// Path classes per memory type, from the protocols (or, without
    /// them, from the lanes of the endpoint configurations: `any`).
    #[serde(default)]
    pub says: BTreeMap<String, Vec<String>>,
    /// `WARN`/`ERROR` lines (at most 16).
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// UCX's log against the tracer's paths.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct UcxLog {
    pub processes: Vec<LogProcess>,
}

/// Splits `[ts] [host:pid:tid] [file.c:123  UCX  LEVEL  ]message` into the
/// pid, the level (if the logger printed one) and the message.
fn split(line: &str) -> Option<(u32, Option<&str>, &str)> {
    let rest = line.trim_start().strip_prefix('[')?;
    let (_, rest) = rest.split_once(']')?;
    let rest = rest.trim_start().strip_prefix('[')?;
    let (who, rest) = rest.split_once(']')?;
    let pid = who.split(':').nth(1)?.trim().parse().ok()?;
    match rest.split_once(" UCX ") {
        Some((_, m)) => {
            let m = m.trim_start();
            let (level, msg) = m.split_once(char::is_whitespace).unwrap_or((m, ""));
            Some((pid, Some(level), msg))
        }
        None => Some((pid, None, rest)),
    }
}

/// Transport names (`tcp`, `cuda_ipc`, `rc_mlx5`) in a lanes or config text.
fn transports(text: &str) -> Vec<&str> {
    text.split(|c: char| c.is_whitespace() || matches!(c, ',' | '(' | ')'))
        .filter_map(|t| t.split_once('/').map(|(tl, _)| tl))
        .filter(|tl| !tl.is_empty() && tl.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .collect()
}

fn is_rdma(tl: &str) -> bool {
    tl.starts_with("rc") || tl.starts_with("dc") || tl.starts_with("ud") || tl == "gga"
}

fn is_shm(tl: &str) -> bool {
    matches!(tl, "posix" | "sysv" | "cma" | "knem" | "xpmem")
}

/// The path class of a protocol for a memory type: the same names as the
/// tracer's verdicts, with `p2p` and `gpudirect-rdma` for either flavour.
pub fn class_of(memory: &str, protocol: &str, transports_text: &str) -> &'static str {
    let tls = transports(transports_text);
    let has = |f: fn(&str) -> bool| tls.iter().any(|t| f(t));
    if has(|t| t == "cuda_ipc") {
        return "p2p";
    }
    let gpu = memory != "host";
    let staged = [
        "pipeline", "copy-in", "copy-out", "staging", "bcopy", "mtype", "fragment",
    ]
    .iter()
    .any(|w| protocol.contains(w));
    match (gpu, has(is_rdma), has(|t| t == "tcp"), has(is_shm)) {
        (true, true, ..) if !staged => "gpudirect-rdma",
        (true, true, ..) | (true, _, true, _) | (true, _, _, true) => "host-staged",
        // cuda_copy (or gdr_copy) alone moves GPU data to and from host
        // memory in the process: the other side of the wire is host memory.
        (true, ..) if has(|t| t == "cuda_copy" || t == "gdr_copy") => "host-staged",
        (false, true, ..) => "rdma",
        (false, _, true, _) => "socket",
        (false, _, _, true) => "shm",
        _ => "unknown",
    }
}

/// The class a tracer verdict stands for, in the log's terms.
fn class_of_transport(t: Transport) -> &'static str {
    match t {
        // The log's `cuda_ipc`: between two GPUs or within one.
        Transport::P2pNvlink | Transport::P2pPcie | Transport::IpcSameDevice => "p2p",
        Transport::GdrPeerMem | Transport::GdrDmabuf => "gpudirect-rdma",
        Transport::HostStaged => "host-staged",
        Transport::Socket => "socket",
        Transport::Shm => "shm",
        Transport::HostOnly => "rdma",
        Transport::GpuDirectStorage
        | Transport::GpuHostDma
        | Transport::Ambiguous
        | Transport::Mixed
        | Transport::Unknown => "unknown",
    }
}

/// The local memory type of an operation (`... from cuda/GPU0`,
/// `... into host memory`, `... from host memory to cuda/dev[0]`).
fn memory_of(operation: &str) -> Option<String> {
    let (_, after) = operation
        .split_once(" from ")
        .or_else(|| operation.split_once(" into "))?;
    let word = after
        .split(|c: char| c == '/' || c.is_whitespace())
        .next()
        .filter(|w| !w.is_empty())?;
    // Managed memory is cuda memory to the tracer (cuMemAllocManaged).
    Some(if word.starts_with("cuda") { "cuda" } else { word }.to_string())
}

/// Operations that move data (not atomics, not keep-alive).
fn data_operation(op: &str) -> bool {
    !op.contains("atomic") && (op.contains(" by ucp_") || op.contains("rendezvous") || op.contains("message"))
}

/// The lane lists of an endpoint configuration that carry data: `tag(...)`,
/// `am(...)`, `rma(...)`, `rma_bw(...)`, `stream(...)`; not keep-alive
/// (`ka`) or atomics (`amo*`).
fn data_lanes(cfg: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = cfg;
    while let Some(open) = rest.find('(') {
        let name = rest[..open]
            .rsplit(|c: char| c.is_whitespace() || c == ')')
            .next()
            .unwrap_or("");
        let Some(close) = rest[open..].find(')') else { break };
        if name != "ka" && !name.starts_with("amo") {
            out.push(&rest[open + 1..open + close]);
        }
        rest = &rest[open + close + 1..];
    }
    out
}

/// Parses a UCX log (any mix of processes' lines).
pub fn parse(text: &str) -> BTreeMap<u32, LogProcess> {
    let mut out: BTreeMap<u32, LogProcess> = BTreeMap::new();
    // The table being read per pid: (configuration, operation, memory).
    let mut table: BTreeMap<u32, (String, String, String)> = BTreeMap::new();
    for line in text.lines() {
        let Some((pid, level, msg)) = split(line) else { continue };
        let p = out.entry(pid).or_insert_with(|| LogProcess {
            pid,
            ..Default::default()
        });
        let m = msg.trim();
        if matches!(level, Some("WARN" | "ERROR")) {
            if p.warnings.len() < 16 {
                p.warnings.push(m.to_string());
            }
            continue;
        }
        if let Some(v) = m.strip_prefix("Version ") {
            p.version = Some(v.to_string());
        } else if let Some(vars) = m.strip_prefix("UCX_* env variables:") {
            p.env = vars.split_whitespace().map(String::from).collect();
        } else if m.starts_with('|') {
            let cells: Vec<&str> = m.trim_matches('|').split('|').map(str::trim).collect();
            match cells.as_slice() {
                // 1.14-1.16: `| cfg | operation |`.
                [config, operation] => {
                    let memory = memory_of(operation).unwrap_or_else(|| "unknown".into());
                    table.insert(pid, (config.to_string(), operation.to_string(), memory));
                }
                // 1.17+: the configuration and the operation on rows of their own.
                [one] => match memory_of(one) {
                    Some(memory) => {
                        let config = table.get(&pid).map(|t| t.0.clone()).unwrap_or_default();
                        table.insert(pid, (config, one.to_string(), memory));
                    }
                    None => {
                        table.insert(pid, (one.to_string(), String::new(), "unknown".into()));
                    }
                },
                [range, protocol, tls] if range.ends_with("inf") => {
                    let Some((config, operation, memory)) = table.get(&pid) else {
                        continue;
                    };
                    if !data_operation(operation) {
                        continue;
                    }
                    let protocol = protocol.trim_start_matches("(?) ");
                    p.protocols.push(Protocol {
                        config: config.clone(),
                        operation: operation.clone(),
                        memory: memory.clone(),
                        range: range.to_string(),
                        protocol: protocol.to_string(),
                        transports: tls.to_string(),
                        class: class_of(memory, protocol, tls).to_string(),
                    });
                }
                _ => {}
            }
        } else if (m.contains("ep_cfg[") || m.contains(" cfg#")) && m.contains('(') {
            p.ep_configs.push(m.to_string());
        }
    }
    for p in out.values_mut() {
        let mut says: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for x in &p.protocols {
            says.entry(x.memory.clone()).or_default().insert(x.class.clone());
        }
        if says.is_empty() {
            // No protocol tables (UCX before protocols v2): the lanes of the
            // endpoint configurations, for any memory type.
            for cfg in &p.ep_configs {
                for lanes in data_lanes(cfg) {
                    for tl in transports(lanes) {
                        let class = class_of("host", "", &format!("{tl}/x"));
                        if class != "unknown" {
                            says.entry("any".into()).or_default().insert(class.into());
                        }
                    }
                }
            }
        }
        p.says = says.into_iter().map(|(k, v)| (k, v.into_iter().collect())).collect();
    }
    out.retain(|_, p| {
        p.version.is_some() || !p.ep_configs.is_empty() || !p.protocols.is_empty() || !p.warnings.is_empty()
    });
    out
}

/// Whether a protocol table's operation is of a path's class
/// (`remote memory read by ucp_get*` for GETs); a served path and a class
/// the log does not name match every operation.
fn of_class(operation: &str, op: OpClass) -> bool {
    let call = match op {
        OpClass::Get => "ucp_get",
        OpClass::Put => "ucp_put",
        OpClass::Send => "ucp_tag_send",
        OpClass::Am => "ucp_am_send",
        _ => return true,
    };
    operation.contains(call) || (op == OpClass::Send && operation.contains("ucp_stream_send"))
}

/// What the log says for a path (None: the log says nothing of it).
fn agreement(p: &LogProcess, path: &Path) -> Option<Agreement> {
    let tables: Vec<&Protocol> = p
        .protocols
        .iter()
        .filter(|x| x.memory == path.memory && of_class(&x.operation, path.op))
        .collect();
    let mine = class_of_transport(path.transport);
    if !tables.is_empty() {
        let lines: Vec<String> = tables
            .iter()
            .map(|x| format!("{}: {} {} via {}", x.operation, x.range, x.protocol, x.transports))
            .collect();
        return Some(Agreement {
            ucx_says: lines.join("; "),
            agrees: tables.iter().any(|x| x.class == mine),
        });
    }
    let classes = p.says.get(&path.memory).or_else(|| p.says.get("any"))?;
    Some(Agreement {
        ucx_says: format!("endpoint lanes: {}", classes.join(", ")),
        agrees: classes.iter().any(|c| c == mine),
    })
}

/// Attaches the log to each UCX path (what UCX said of it and whether it
/// agrees), and returns it for the UCX section (every process it mentions).
pub fn corroborate(paths: &mut [Path], text: &str) -> UcxLog {
    let log = parse(text);
    for path in paths
        .iter_mut()
        .filter(|x| matches!(x.peer_kind, PeerKind::UcxEndpoint | PeerKind::Remote))
    {
        if let Some(p) = log.get(&path.pid) {
            path.log = agreement(p, path);
        }
    }
    UcxLog {
        processes: log.into_values().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::ucx::UcxReport;

    // Lines in the formats of UCX 1.13 (Debian ucx-utils) and 1.22 (PyPI
    // libucx-cu12), as openucx/ucx PR #7950/#8699 and issue threads show them.
    const LOG_122: &str = "\
[1796086758.385979] [gpu:4242:0]     ucp_context.c:2339 UCX  INFO  Version 1.22.0 (loaded from /site/libucx/lib/libucp.so.0)
[1796086758.388204] [gpu:4242:0]          parser.c:2314 UCX  INFO  UCX_* env variables: UCX_PROTO_INFO=y UCX_LOG_LEVEL=info
[1796086758.4] [gpu:4242:0]      ucp_worker.c:1962 UCX  INFO    ucp_context_0 intra-node cfg#1 tag(cuda_ipc/cuda sysv/memory)
[1796086758.5] [gpu:4242:0]   +--------------------------------+---------------------------------------------------+
[1796086758.5] [gpu:4242:0]   | ucp_context_0 intra-node cfg#1 | tagged message by ucp_tag_send* from cuda/GPU0    |
[1796086758.5] [gpu:4242:0]   +--------------------------------+---------------------------------------+-----------+
[1796086758.5] [gpu:4242:0]   |                         0..514 | eager short                           | sysv/memory   |
[1796086758.5] [gpu:4242:0]   |                       515..inf | rendezvous zero-copy read from remote | cuda_ipc/cuda |
[1796086758.5] [gpu:4242:0]   +--------------------------------+---------------------------------------+-----------+
[1796086758.6] [gpu:4243:0]   | ucp_context_0 intra-node cfg#1 | tagged message by ucp_tag_send* from cuda/GPU1    |
[1796086758.6] [gpu:4243:0]   |                       0..inf | (?) rendezvous pipeline cuda_copy, fragment 512K | tcp/lo |
[1796086758.7] [gpu:4243:0]   | ucp_context_0 intra-node cfg#1 | remote memory write by ucp_put*(fast-completion) from host memory |
[1796086758.7] [gpu:4243:0]   |                  9384..inf | zero-copy                              | posix/memory |
[1796086758.8] [gpu:4243:0]      ucp_worker.c:1962 UCX  WARN  cuda_ipc: failed to open memory handle
";
    const LOG_113: &str = "\
[1796086758.385979] [vm:20131:0]     ucp_context.c:1849 UCX  INFO  Version 1.13.1 (loaded from /lib/x86_64-linux-gnu/libucp.so.0)
[1796086758.388147] [vm:20131:0]      ucp_worker.c:1462 UCX  DIAG  failed to open CM on component rdmacm with status Input/output error
[1796086758.388433] [vm:20131:0]      ucp_worker.c:1763 UCX  INFO    ep_cfg[0]: tag(rc_verbs/rxe0:1 tcp/lo)
";

    #[test]
    fn proto_tables_give_the_bulk_protocol_per_memory_type() {
        let l = parse(LOG_122);
        let a = &l[&4242];
        assert_eq!(
            a.version.as_deref(),
            Some("1.22.0 (loaded from /site/libucx/lib/libucp.so.0)")
        );
        assert_eq!(a.env, vec!["UCX_PROTO_INFO=y", "UCX_LOG_LEVEL=info"]);
        assert_eq!(a.protocols.len(), 1, "only the row that reaches inf");
        assert_eq!(a.protocols[0].memory, "cuda");
        assert_eq!(a.protocols[0].class, "p2p");
        assert_eq!(a.says["cuda"], vec!["p2p"]);
        let b = &l[&4243];
        assert_eq!(b.says["cuda"], vec!["host-staged"], "pipeline through tcp");
        assert_eq!(b.says["host"], vec!["shm"]);
        assert_eq!(b.protocols[0].protocol, "rendezvous pipeline cuda_copy, fragment 512K");
        assert!(b.warnings[0].contains("cuda_ipc"));
    }

    // ucx_perftest tag_bw over tcp with PyPI's libucx-cu12 1.22.0 on this
    // host (UCX_PROTO_INFO=y UCX_LOG_LEVEL=info), lines as printed.
    const LOG_122_TCP: &str = "\
[1796091168.510625] [vm:28235:0]     ucp_context.c:2725 UCX  INFO  Version 1.22.0 (loaded from /tmp/ugpu/libucx/lib/libucp.so.0)
[1796091168.517177] [vm:28235:0]      ucp_worker.c:1991 UCX  INFO    perftest intra-node cfg#0 tag(tcp/lo tcp/eth0)
[1796091168.523295] [vm:28235:0]   +-----------+-------------------------------------------------+-----------------------------------+
[1796091168.523295] [vm:28235:0]   | perftest intra-node cfg#0                                                                       |
[1796091168.523295] [vm:28235:0]   | tagged message by ucp_tag_send* from host memory                                                |
[1796091168.523295] [vm:28235:0]   +-----------+-------------------------------------------------+-----------------------------------+
[1796091168.523295] [vm:28235:0]   |   Range   |                   Description                   |              Config               |
[1796091168.523295] [vm:28235:0]   +-----------+-------------------------------------------------+-----------------------------------+
[1796091168.523295] [vm:28235:0]   |         0 | eager short                                     | tcp/lo                            |
[1796091168.523295] [vm:28235:0]   |   1..8339 | eager zero-copy copy-out                        | tcp/lo                            |
[1796091168.523295] [vm:28235:0]   | 8340..inf | (?) rendezvous zero-copy fenced write to remote | 52% on tcp/lo and 48% on tcp/eth0 |
[1796091168.523295] [vm:28235:0]   +-----------+-------------------------------------------------+-----------------------------------+
";

    #[test]
    fn proto_tables_of_ucx_1_22() {
        let l = parse(LOG_122_TCP);
        let p = &l[&28235];
        assert_eq!(p.protocols.len(), 1);
        let x = &p.protocols[0];
        assert_eq!(x.config, "perftest intra-node cfg#0");
        assert_eq!(x.operation, "tagged message by ucp_tag_send* from host memory");
        assert_eq!((x.memory.as_str(), x.range.as_str()), ("host", "8340..inf"));
        assert_eq!(x.protocol, "rendezvous zero-copy fenced write to remote");
        assert_eq!(x.class, "socket");
        assert_eq!(p.says["host"], vec!["socket"]);
    }

    #[test]
    fn ep_config_lanes_without_proto_tables() {
        let l = parse(LOG_113);
        let p = &l[&20131];
        assert!(p.protocols.is_empty());
        assert_eq!(p.ep_configs, vec!["ep_cfg[0]: tag(rc_verbs/rxe0:1 tcp/lo)"]);
        assert_eq!(p.says["any"], vec!["rdma", "socket"]);
        assert_eq!(
            data_lanes(
                "ucp_context_0 intra-node cfg#2 rma_am(tcp/eth1)  amo_am(tcp/eth1)  am(tcp/eth6 cuda_ipc/cuda)  ka(tcp/eth1)"
            ),
            vec!["tcp/eth1", "tcp/eth6 cuda_ipc/cuda"]
        );
        assert!(p.warnings.is_empty(), "DIAG is not a warning");
    }

    #[test]
    fn classes() {
        assert_eq!(
            class_of("cuda", "rendezvous zero-copy read from remote", "rc_mlx5/mlx5_0:1"),
            "gpudirect-rdma"
        );
        assert_eq!(
            class_of("cuda", "rendezvous pipeline cuda_copy", "rc_mlx5/mlx5_0:1"),
            "host-staged"
        );
        assert_eq!(class_of("cuda", "eager copy-in copy-out", "sysv/memory"), "host-staged");
        assert_eq!(
            class_of("cuda", "rendezvous fragmented copy-in copy-out", "cuda_copy/cuda"),
            "host-staged"
        );
        assert_eq!(class_of("host", "eager short", "cuda_copy/cuda"), "unknown");
        assert_eq!(
            class_of("host", "zero-copy", "rc_mlx5/mlx5_0:1 50% on path0 and 50% on path1"),
            "rdma"
        );
        assert_eq!(class_of("host", "multi-frag eager", "tcp/lo"), "socket");
        assert_eq!(class_of("host", "zero-copy", "cma/memory"), "shm");
        assert_eq!(
            memory_of("remote memory write by ucp_put*(fast-completion) from host memory to cuda/dev[0]").as_deref(),
            Some("host")
        );
        assert_eq!(
            memory_of("rendezvous data fetch into cuda-managed/GPU0").as_deref(),
            Some("cuda")
        );
    }

    #[test]
    fn agreement_per_path() {
        let mut ux = UcxReport::default();
        let path = |pid: u32, t: Transport, memory: &str, op: OpClass| {
            let mut p = Path::new(pid, PeerKind::UcxEndpoint, "0x1".into(), op, memory);
            p.transport = t;
            p
        };
        let mut paths = vec![
            path(4242, Transport::P2pNvlink, "cuda", OpClass::Send),
            path(4243, Transport::P2pNvlink, "cuda", OpClass::Send),
            path(4243, Transport::Shm, "host", OpClass::Put),
        ];
        ux.log = Some(corroborate(&mut paths, LOG_122));
        let a = paths[0].log.as_ref().unwrap();
        assert!(a.agrees, "{a:?}");
        assert!(a.ucx_says.contains("cuda_ipc/cuda"));
        assert!(!paths[1].log.as_ref().unwrap().agrees, "the log says host-staged");
        assert!(paths[2].log.as_ref().unwrap().agrees);
        assert_eq!(ux.log.as_ref().unwrap().processes.len(), 2);
    }
}
