//! The job view from the fleet's own store: `gdrtrace serve`'s series as a
//! Prometheus server scraped them from every node, read over its HTTP API
//! (`/api/v1/query`, instant queries) and joined by the same code as the
//! reports (`super::assemble`). A rank is a `gdrtrace_transport_verdict_info`
//! series with a `communicator` label (NCCL's `commId`, or `local-N` where
//! the agent had no identity); its calls and bytes are its
//! `gdrtrace_collective_estimated_*` counters, its paths the
//! `gdrtrace_path_*` series whose peer is that communicator, its host the
//! process's `nccl_hostid` label, else the node.
use std::{collections::BTreeMap, time::Duration};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use serde::Deserialize;

use super::{Job, JobRank, Member, RankPath};

/// How long one query may take, connection included.
const TIMEOUT: Duration = Duration::from_secs(30);
/// The most of one answer read.
const MAX_ANSWER: usize = 256 << 20;

/// Labels of one series.
type Labels = BTreeMap<String, String>;

/// A Prometheus server's address, from `http://HOST:PORT[/PREFIX]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Server {
    host: String,
    port: u16,
    prefix: String,
}

impl Server {
    pub fn parse(url: &str) -> Result<Server, String> {
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            if url.starts_with("https://") {
                format!("{url}: https is not supported; reach Prometheus over http (a local port-forward)")
            } else {
                format!("{url}: not an http:// URL")
            }
        })?;
        let (authority, prefix) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => (
                h,
                p.parse::<u16>()
                    .map_err(|_| format!("{url}: port {p} is not a number"))?,
            ),
            _ => (authority, 80),
        };
        if host.is_empty() {
            return Err(format!("{url}: no host"));
        }
        Ok(Server {
            host: host.to_string(),
            port,
            prefix: prefix.trim_end_matches('/').to_string(),
        })
    }

    fn path(&self, query: &str) -> String {
        let prefix = if self.prefix.is_empty() {
            String::new()
        } else {
            format!("/{}", self.prefix)
        };
        format!("{prefix}/api/v1/query?query={}", encode(query))
    }
}

/// A query string's bytes as RFC 3986 allows them in a query component:
/// the unreserved ones as they are, the rest percent-encoded.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Prometheus's answer to an instant query (`/api/v1/query`).
#[derive(Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Vec<Sample>,
}

#[derive(Deserialize)]
struct Sample {
    metric: Labels,
    /// `[time, "value"]`.
    value: (f64, String),
}

/// An instant vector: each series's labels and value.
async fn query(server: &Server, q: &str) -> Result<Vec<(Labels, f64)>, String> {
    let at = format!("http://{}:{}", server.host, server.port);
    let fail = |e: &dyn std::fmt::Display| format!("querying Prometheus at {at}: {e}");
    let stream = tokio::net::TcpStream::connect((server.host.as_str(), server.port))
        .await
        .map_err(|e| fail(&e))?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(|e| fail(&e))?;
    tokio::spawn(conn);
    let req = hyper::Request::get(server.path(q))
        .header(hyper::header::HOST, format!("{}:{}", server.host, server.port))
        .header(hyper::header::ACCEPT, "application/json")
        .body(Empty::<Bytes>::new())
        .map_err(|e| fail(&e))?;
    let resp = send.send_request(req).await.map_err(|e| fail(&e))?;
    let status = resp.status();
    let body = http_body_util::Limited::new(resp.into_body(), MAX_ANSWER)
        .collect()
        .await
        .map_err(|e| fail(&e))?
        .to_bytes();
    let answer: Answer = serde_json::from_slice(&body).map_err(|e| {
        fail(&format!(
            "HTTP {status}, not Prometheus's JSON ({e}): {}",
            crate::error::cut_middle(&String::from_utf8_lossy(&body), 120)
        ))
    })?;
    if answer.status != "success" {
        return Err(fail(&format!(
            "{q}: {}",
            answer.error.as_deref().unwrap_or("an error without a message")
        )));
    }
    let data = answer.data.ok_or_else(|| fail(&"a success without data"))?;
    if data.result_type != "vector" {
        return Err(fail(&format!("{q} gave a {}, not a vector", data.result_type)));
    }
    Ok(data
        .result
        .into_iter()
        .map(|s| (s.metric, s.value.1.parse().unwrap_or(f64::NAN)))
        .collect())
}

/// A series selector's matchers (`{namespace="a"}` or `namespace="a"`),
/// with `extra` ones, as `metric{...}`.
fn selector(metric: &str, matchers: &str, extra: &str) -> String {
    let m = matchers.trim().trim_start_matches('{').trim_end_matches('}').trim();
    let all: Vec<&str> = [m, extra].into_iter().filter(|s| !s.is_empty()).collect();
    format!("{metric}{{{}}}", all.join(","))
}

/// A process of the fleet: its node and pid.
type ProcKey = (String, String);

fn key(l: &Labels) -> ProcKey {
    let get = |k: &str| l.get(k).cloned().unwrap_or_default();
    (get("node"), get("pid"))
}

/// The job view of every NCCL communicator the series matching
/// `matchers` show (`gdrtrace job --prometheus URL --match SELECTOR`).
pub fn job(url: &str, matchers: &str) -> Result<Job, String> {
    let server = Server::parse(url)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the HTTP client: {e}"))?;
    rt.block_on(async {
        let q = |metric: &str, extra: &str| selector(metric, matchers, extra);
        let ask = |s: String| {
            let server = server.clone();
            async move {
                tokio::time::timeout(TIMEOUT, query(&server, &s))
                    .await
                    .map_err(|_| format!("Prometheus at {url} did not answer {s} within {TIMEOUT:?}"))?
            }
        };
        let verdicts = ask(q("gdrtrace_transport_verdict_info", "communicator!=\"\"")).await?;
        let procs = ask(q("gdrtrace_process_info", "")).await?;
        let calls = ask(format!(
            "sum by (node, pid, communicator) ({})",
            q("gdrtrace_collective_estimated_calls_total", "")
        ))
        .await?;
        let bytes = ask(format!(
            "sum by (node, pid, communicator) ({})",
            q("gdrtrace_collective_estimated_bytes_total", "")
        ))
        .await?;
        let nccl = "peer_kind=\"nccl-communicator\"";
        let path_bytes = ask(q("gdrtrace_path_bytes", nccl)).await?;
        let path_host = ask(q("gdrtrace_path_host_bytes", nccl)).await?;
        Ok(view(url, &verdicts, &procs, &calls, &bytes, &path_bytes, &path_host))
    })
}

/// The view of the series read (each a vector of an instant query).
fn view(
    url: &str,
    verdicts: &[(Labels, f64)],
    procs: &[(Labels, f64)],
    calls: &[(Labels, f64)],
    bytes: &[(Labels, f64)],
    path_bytes: &[(Labels, f64)],
    path_host: &[(Labels, f64)],
) -> Job {
    let hostid: BTreeMap<ProcKey, String> = procs
        .iter()
        .filter_map(|(l, _)| Some((key(l), l.get("nccl_hostid").filter(|h| !h.is_empty())?.clone())))
        .collect();
    let per_comm = |v: &[(Labels, f64)]| -> BTreeMap<(ProcKey, String), u64> {
        v.iter()
            .map(|(l, x)| ((key(l), l.get("communicator").cloned().unwrap_or_default()), *x as u64))
            .collect()
    };
    let (calls, bytes) = (per_comm(calls), per_comm(bytes));
    let host_bytes: BTreeMap<Labels, u64> = path_host.iter().map(|(l, x)| (without_name(l), *x as u64)).collect();
    let nodes: Vec<String> = verdicts
        .iter()
        .map(|(l, _)| key(l).0)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut members = Vec::new();
    for (l, _) in verdicts {
        let get = |k: &str| l.get(k).cloned().unwrap_or_default();
        let communicator = get("communicator");
        if communicator == "other" {
            continue;
        }
        let k = key(l);
        let Ok(pid) = k.1.parse::<u32>() else { continue };
        let paths = path_bytes
            .iter()
            .filter(|(p, _)| key(p) == k && p.get("peer") == Some(&communicator))
            .map(|(p, x)| RankPath {
                op: p.get("op").cloned().unwrap_or_default(),
                memory: p.get("memory").cloned().unwrap_or_default(),
                transport: p.get("transport").cloned().unwrap_or_default(),
                via: String::new(),
                host_staged: p.get("host_staged").is_some_and(|h| h == "true"),
                bytes: *x as u64,
                host_bytes: host_bytes.get(&without_name(p)).copied().unwrap_or(0),
            })
            .collect();
        let comm_id = crate::identity::parse_id(&communicator);
        let input = nodes.iter().position(|n| *n == k.0).unwrap_or(0);
        let cause = get("cause");
        members.push(Member {
            input,
            view: JobRank {
                rank: get("rank").parse().ok(),
                source: format!("{url} node {}", k.0),
                host: String::new(),
                host_key: String::new(),
                nccl_hostid: hostid.get(&k).cloned(),
                hostname: k.0.clone(),
                boot_id: String::new(),
                pid,
                comm: get("comm"),
                communicator: communicator.clone(),
                comm_id_source: None,
                devices: None,
                transport: get("transport"),
                host_staged: get("host_staged") == "true",
                cause: None,
                cause_kind: (!cause.is_empty()).then_some(cause),
                calls: calls.get(&(k.clone(), communicator.clone())).copied().unwrap_or(0),
                bytes: bytes.get(&(k.clone(), communicator.clone())).copied().unwrap_or(0),
                paths,
            },
            comm_id: comm_id.map(|c| (c, None)),
            nranks: get("nranks").parse().ok(),
            init: None,
            connections: Vec::new(),
            tried: vec![format!(
                "the agent on node {} had no identity for it ({communicator}): run serve with --nccl-ras, or trace the job from its start",
                k.0
            )],
        });
    }
    super::assemble(nodes.iter().map(|n| format!("{url} node {n}")).collect(), members, &[])
}

/// A series's labels without its name (a path's bytes and host bytes are
/// two series with the same labels).
fn without_name(l: &Labels) -> Labels {
    l.iter()
        .filter(|(k, _)| k.as_str() != "__name__")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_selectors() {
        let s = Server::parse("http://127.0.0.1:9090").unwrap();
        assert_eq!((s.host.as_str(), s.port, s.prefix.as_str()), ("127.0.0.1", 9090, ""));
        let s = Server::parse("http://prom.example/prometheus/").unwrap();
        assert_eq!(
            (s.host.as_str(), s.port, s.prefix.as_str()),
            ("prom.example", 80, "prometheus")
        );
        assert_eq!(s.path("up"), "/prometheus/api/v1/query?query=up");
        assert!(
            Server::parse("https://x:9090")
                .unwrap_err()
                .contains("https is not supported")
        );
        assert!(Server::parse("x:9090").unwrap_err().contains("not an http:// URL"));
        assert!(Server::parse("http://x:port").unwrap_err().contains("not a number"));
        assert_eq!(
            selector("m", "{namespace=\"a\"}", "peer_kind=\"x\""),
            "m{namespace=\"a\",peer_kind=\"x\"}"
        );
        assert_eq!(selector("m", "", ""), "m{}");
        assert_eq!(encode("m{a=\"b c\"}"), "m%7Ba%3D%22b%20c%22%7D");
    }

    fn labels(kv: &[(&str, &str)]) -> Labels {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// Two ranks on two nodes, one communicator: the view the reports give.
    #[test]
    fn series_make_one_communicator() {
        let verdict = |node: &str, pid: &str, rank: &str| {
            (
                labels(&[
                    ("__name__", "gdrtrace_transport_verdict_info"),
                    ("node", node),
                    ("pid", pid),
                    ("comm", "python3"),
                    ("communicator", "0xa2bd4a35a81cd717"),
                    ("rank", rank),
                    ("nranks", "2"),
                    ("transport", "socket"),
                    ("host_staged", "true"),
                    ("cause", "no-rdma-device"),
                ]),
                1.0,
            )
        };
        let per = |node: &str, pid: &str, v: f64| {
            (
                labels(&[("node", node), ("pid", pid), ("communicator", "0xa2bd4a35a81cd717")]),
                v,
            )
        };
        let path = |name: &str, node: &str, pid: &str| {
            labels(&[
                ("__name__", name),
                ("node", node),
                ("pid", pid),
                ("peer_kind", "nccl-communicator"),
                ("peer", "0xa2bd4a35a81cd717"),
                ("op", "collective"),
                ("memory", "cuda"),
                ("transport", "socket"),
                ("host_staged", "true"),
            ])
        };
        let job = view(
            "http://p:9090",
            &[verdict("n0", "10", "0"), verdict("n1", "20", "1")],
            &[(labels(&[("node", "n0"), ("pid", "10"), ("nccl_hostid", "emu-0")]), 1.0)],
            &[per("n0", "10", 5.0), per("n1", "20", 6.0)],
            &[per("n0", "10", 500.0), per("n1", "20", 600.0)],
            &[(path("gdrtrace_path_bytes", "n0", "10"), 500.0)],
            &[(path("gdrtrace_path_host_bytes", "n0", "10"), 400.0)],
        );
        assert_eq!(job.communicators.len(), 1, "{job:?}");
        let c = &job.communicators[0];
        assert_eq!(c.comm_id.as_deref(), Some("0xa2bd4a35a81cd717"));
        assert_eq!((c.nranks, c.hosts), (Some(2), 2));
        assert_eq!(
            c.ranks
                .iter()
                .map(|r| (r.rank, r.pid, r.host.as_str(), r.calls))
                .collect::<Vec<_>>(),
            [(Some(0), 10, "emu-0", 5), (Some(1), 20, "n1", 6)]
        );
        assert_eq!(c.ranks[0].paths[0].host_bytes, 400);
        assert_eq!(c.fell_back, [0, 1]);
        assert_eq!(c.ranks[0].cause_kind.as_deref(), Some("no-rdma-device"));
    }
}
