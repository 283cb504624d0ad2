//! `gdrtrace drive ucx`: UCX's own benchmark, `ucx_perftest`, as a server
//! and a client on this host (two processes, as UCX jobs run), with host or
//! CUDA memory, in a forced transport mode (`UCX_TLS`). The client sends
//! (`-t tag_bw`: `ucp_tag_send_nbx`; `ucp_put_bw`: `ucp_put_nbx`), the
//! server posts receives. Both run with `UCX_PROTO_INFO=y` and
//! `UCX_LOG_LEVEL=info`, and their output is kept as the UCX log that
//! corroborates the tracer's paths (`--log`). The summary holds the
//! perftest's own counts (its `Final:` line) to hold the tracer to.
//!
//! Warm-up is off (`-w 0`): with warm-up, ucx_perftest 1.13 sends more
//! messages than `-n` plus `-w` (55 and 57 for `-n 50 -w 5`, measured on
//! this host), so only `-w 0` makes the sends countable from its output.
use std::{
    collections::BTreeMap,
    io::Read as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};

use crate::units::parse_size;

/// Errors of `drive ucx`, one line each.
#[derive(Debug, thiserror::Error)]
pub enum UcxError {
    #[error("ucx: {0}")]
    Usage(String),
    #[error("ucx: {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("ucx: {0}")]
    Perftest(String),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> UcxError {
    let what = what.into();
    move |source| UcxError::Io { what, source }
}

/// What to run the perftest over.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UcxMode {
    /// Host memory, UCX_TLS=tcp.
    HostTcp,
    /// Host memory, UCX_TLS=posix (shared memory).
    HostShm,
    /// Host memory, UCX_TLS=rc on the first RDMA device.
    HostRc,
    /// Host memory over rc_verbs on the first RDMA device through UCX's
    /// transport layer alone (UCT `put_bw`, zero-copy RDMA WRITE): what
    /// Soft-RoCE under emulation carries (UCP's wire-up over it times out).
    HostRcUct,
    /// CUDA memory, UCX's own choice (cuda_ipc between local GPUs).
    Cuda,
    /// CUDA memory with UCX_TLS=^cuda_ipc: cuda_copy staging through host memory.
    CudaNoIpc,
}

impl UcxMode {
    pub const ALL: [UcxMode; 6] = [
        UcxMode::HostTcp,
        UcxMode::HostShm,
        UcxMode::HostRc,
        UcxMode::HostRcUct,
        UcxMode::Cuda,
        UcxMode::CudaNoIpc,
    ];

    pub fn name(self) -> &'static str {
        match self {
            UcxMode::HostTcp => "host-tcp",
            UcxMode::HostShm => "host-shm",
            UcxMode::HostRc => "host-rc",
            UcxMode::HostRcUct => "host-rc-uct",
            UcxMode::Cuda => "cuda",
            UcxMode::CudaNoIpc => "cuda-no-ipc",
        }
    }

    /// The perftest's memory type (`-m`).
    pub fn memory(self) -> &'static str {
        match self {
            UcxMode::Cuda | UcxMode::CudaNoIpc => "cuda",
            _ => "host",
        }
    }

    /// `UCX_TLS` of the mode (None: UCX's choice).
    pub fn tls(self) -> Option<&'static str> {
        match self {
            UcxMode::HostTcp => Some("tcp"),
            UcxMode::HostShm => Some("posix"),
            UcxMode::HostRc => Some("rc"),
            UcxMode::HostRcUct => None,
            UcxMode::Cuda => None,
            UcxMode::CudaNoIpc => Some("^cuda_ipc"),
        }
    }

    /// The UCT transport a UCT-level mode drives (no UCP endpoints).
    pub fn uct(self) -> Option<&'static str> {
        (self == UcxMode::HostRcUct).then_some("rc_verbs")
    }

    /// The verdicts the mode should produce for the sender's memory.
    pub fn expected(self) -> &'static [&'static str] {
        match self {
            UcxMode::HostTcp => &["socket"],
            UcxMode::HostShm => &["shm"],
            UcxMode::HostRc | UcxMode::HostRcUct => &["host-only"],
            // Both processes on one GPU (--gpus 0,0): cuda_ipc within it.
            UcxMode::Cuda => &["p2p/nvlink", "p2p/pcie", "ipc/same-device"],
            UcxMode::CudaNoIpc => &["host-staged"],
        }
    }
}

impl std::fmt::Display for UcxMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether UCX's registration cache is used.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rcache {
    /// UCX's defaults.
    On,
    /// UCX_RCACHE_ENABLE=n and UCX_IB_REG_METHODS=direct: every rendezvous
    /// transfer registers its buffer with the NIC.
    Off,
}

/// Options of `gdrtrace drive ucx`.
#[derive(clap::Args, Clone, Debug)]
pub struct UcxOpts {
    /// Transport mode and memory type.
    #[arg(long, value_enum, default_value_t = UcxMode::HostTcp)]
    pub mode: UcxMode,
    /// The perftest test (`tag_bw`, `ucp_put_bw`, `ucp_get`, `stream_bw`, `ucp_am_bw`).
    #[arg(long, default_value = "tag_bw")]
    pub test: String,
    /// Message size (K, M, G are powers of 1024).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "1M")]
    pub size: u64,
    /// Messages (`-n`; warm-up is off).
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub iterations: u64,
    /// UCX's registration cache.
    #[arg(long, value_enum, default_value_t = Rcache::On)]
    pub rcache: Rcache,
    /// The ucx_perftest to run (default: ucx_perftest on PATH).
    #[arg(long, value_name = "PATH")]
    pub perftest: Option<PathBuf>,
    /// GPUs of the server and the client (CUDA modes; CUDA_VISIBLE_DEVICES of each).
    #[arg(long, value_name = "SERVER,CLIENT", default_value = "0,1")]
    pub gpus: String,
    /// More environment for both processes (KEY=VALUE, repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// Write both processes' output (the UCX log, with UCX_PROTO_INFO lines) to FILE.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Stop both and fail after this long.
    #[arg(long, value_name = "DURATION", value_parser = crate::units::parse_duration, default_value = "120s")]
    pub timeout: Duration,
    /// Also write the summary as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
}

/// What ran and what the perftest said.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct UcxSummary {
    pub mode: UcxMode,
    pub test: String,
    pub memory: String,
    /// The environment the mode set on both processes.
    pub env: BTreeMap<String, String>,
    pub perftest: String,
    pub server_pid: u32,
    pub client_pid: u32,
    pub size: u64,
    /// Messages the perftest says it ran (`Final:` line).
    pub iterations: u64,
    /// iterations x size: what the client moved.
    pub bytes: u64,
    /// Its average bandwidth (MB/s, the perftest's unit).
    pub bandwidth_mb_s: f64,
    pub elapsed_s: f64,
    /// Where both processes' output went (`--log`).
    pub log: Option<String>,
}

impl UcxSummary {
    pub fn line(&self) -> String {
        let env: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!(
            "ucx: mode={} test={} memory={} iterations={} size={} bytes={} bandwidth={:.1}MB/s server_pid={} client_pid={} env: {}",
            self.mode,
            self.test,
            self.memory,
            self.iterations,
            self.size,
            self.bytes,
            self.bandwidth_mb_s,
            self.server_pid,
            self.client_pid,
            env.join(" ")
        )
    }
}

/// The ucx_perftest to use: `--perftest`, else the one on PATH.
pub fn find_perftest(given: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = given {
        return p.is_file().then(|| p.to_path_buf());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("ucx_perftest"))
        .find(|p| p.is_file())
}

/// Memory types the perftest was built for (`-m` in its help: `host`, `cuda`, ...).
pub fn memory_types(perftest: &Path) -> Vec<String> {
    let Ok(out) = Command::new(perftest).arg("-h").stdin(Stdio::null()).output() else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    // The help lists one memory type per line after `-m`: "host - System
    // memory" (1.22 lists every name UCX knows, loaded or not).
    let mut out = Vec::new();
    let mut in_list = false;
    for t in text.lines().map(str::trim) {
        if t.starts_with("-m ") {
            in_list = true;
        } else if in_list && t.starts_with('-') {
            break;
        } else if in_list
            && let Some((name, _)) = t.split_once(" - ")
            && !name.contains(' ')
            && name != "(null)"
        {
            out.push(name.to_string());
        }
    }
    out
}

/// The first RDMA device and port 1 (`rxe0:1`), for `host-rc`.
fn rdma_device() -> Option<String> {
    let mut devs: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    devs.sort();
    devs.into_iter().next().map(|d| format!("{d}:1"))
}

fn rdma() -> Result<String, UcxError> {
    rdma_device()
        .ok_or_else(|| UcxError::Usage("the rc modes need an RDMA device (/sys/class/infiniband is empty)".into()))
}

/// A free TCP port for the perftest's own connection.
fn free_port() -> Result<u16, UcxError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(io_err("finding a free port"))?;
    Ok(l.local_addr().map_err(io_err("finding a free port"))?.port())
}

/// Whether something listens on `port` (TCP, IPv4 or IPv6), from /proc:
/// connecting to check would use up the perftest server's one accept.
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let mut it = l.split_whitespace();
                let local = it.nth(1).unwrap_or("");
                let state = it.nth(1).unwrap_or("");
                local.ends_with(&want) && state == "0A"
            })
        })
    })
}

/// The environment of both processes.
fn mode_env(o: &UcxOpts) -> Result<BTreeMap<String, String>, UcxError> {
    let mut env = BTreeMap::new();
    env.insert("UCX_PROTO_INFO".into(), "y".into());
    env.insert("UCX_LOG_LEVEL".into(), "info".into());
    // The GPU hosts here require NVLink multicast off in every program.
    for k in ["NCCL_NVLS_ENABLE", "NVSHMEM_DISABLE_NVLS"] {
        env.insert(k.into(), if k == "NCCL_NVLS_ENABLE" { "0" } else { "1" }.into());
    }
    env.insert("TORCH_SYMM_MEM_DISABLE_MULTICAST".into(), "1".into());
    if let Some(tls) = o.mode.tls() {
        env.insert("UCX_TLS".into(), tls.into());
    }
    if o.mode == UcxMode::HostRc {
        env.insert("UCX_NET_DEVICES".into(), rdma()?);
    }
    if o.rcache == Rcache::Off {
        env.insert("UCX_RCACHE_ENABLE".into(), "n".into());
        env.insert("UCX_IB_REG_METHODS".into(), "direct".into());
    }
    for kv in &o.env {
        let (k, v) = kv
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| UcxError::Usage(format!("--env {kv:?}: expected KEY=VALUE")))?;
        env.insert(k.into(), v.into());
    }
    Ok(env)
}

fn spawn(
    perftest: &Path,
    args: &[String],
    env: &BTreeMap<String, String>,
    gpu: Option<&str>,
) -> Result<Child, UcxError> {
    let mut cmd = Command::new(perftest);
    cmd.args(args)
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(g) = gpu {
        cmd.env("CUDA_VISIBLE_DEVICES", g);
    }
    cmd.spawn().map_err(io_err(format!("starting {}", perftest.display())))
}

/// Waits for a child until `deadline`; kills it after.
fn wait_until(child: &mut Child, deadline: Instant) -> Result<Option<std::process::ExitStatus>, UcxError> {
    loop {
        if let Some(s) = child.try_wait().map_err(io_err("waiting for ucx_perftest"))? {
            return Ok(Some(s));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads a child's output (after it exited).
fn output(child: &mut Child) -> String {
    let mut text = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut text);
    }
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut text);
    }
    text
}

/// The `Final:` line of ucx_perftest: iterations and average bandwidth
/// (`Final: N lat50 lat_avg lat_overall bw_avg bw_overall rate_avg rate_overall`).
pub fn parse_final(text: &str) -> Option<(u64, f64)> {
    let line = text.lines().find(|l| l.trim_start().starts_with("Final:"))?;
    let f: Vec<&str> = line.split_whitespace().collect();
    Some((f.get(1)?.parse().ok()?, f.get(5)?.parse().ok()?))
}

/// Runs the server and the client; returns the summary.
pub fn run(o: &UcxOpts) -> Result<UcxSummary, UcxError> {
    let perftest = find_perftest(o.perftest.as_deref()).ok_or_else(|| {
        UcxError::Usage(match &o.perftest {
            Some(p) => format!("{} is not a file", p.display()),
            None => {
                "ucx_perftest is not on PATH (Debian: apt-get install ucx-utils; PyPI: libucx-cu12, libucx/bin/)".into()
            }
        })
    })?;
    if o.iterations == 0 || o.size == 0 {
        return Err(UcxError::Usage("--iterations and --size must be positive".into()));
    }
    let env = mode_env(o)?;
    let (server_gpu, client_gpu) = match o.mode.memory() {
        "cuda" => {
            let (a, b) = o
                .gpus
                .split_once(',')
                .ok_or_else(|| UcxError::Usage(format!("--gpus {:?}: expected SERVER,CLIENT", o.gpus)))?;
            (Some(a.trim()), Some(b.trim()))
        }
        _ => (None, None),
    };
    let port = free_port()?;
    let started = Instant::now();
    let deadline = started + o.timeout;
    let mut server = spawn(&perftest, &["-p".into(), port.to_string()], &env, server_gpu)?;
    while !listening(port) {
        if let Some(s) = server.try_wait().map_err(io_err("waiting for the server"))? {
            return Err(UcxError::Perftest(format!(
                "the server exited before listening ({s}): {}",
                output(&mut server).lines().last().unwrap_or("")
            )));
        }
        if Instant::now() >= deadline {
            let _ = server.kill();
            let _ = server.wait();
            return Err(UcxError::Perftest(format!("the server did not listen on port {port}")));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let memory = o.mode.memory();
    // UCT modes run UCT's put test with zero-copy (registered buffers).
    let test = match o.mode.uct() {
        Some(_) if o.test == "tag_bw" => "put_bw".to_string(),
        _ => o.test.clone(),
    };
    let mut args: Vec<String> = [
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-t",
        &test,
        "-s",
        &o.size.to_string(),
        "-n",
        &o.iterations.to_string(),
        "-w",
        "0",
        "-m",
        &format!("{memory},{memory}"),
    ]
    .map(String::from)
    .to_vec();
    if let Some(tl) = o.mode.uct() {
        args.extend([
            "-d".to_string(),
            rdma()?,
            "-x".into(),
            tl.into(),
            "-D".into(),
            "zcopy".into(),
        ]);
    }
    let mut client = spawn(&perftest, &args, &env, client_gpu)?;
    let (server_pid, client_pid) = (server.id(), client.id());
    let client_status = wait_until(&mut client, deadline)?;
    let server_status = wait_until(&mut server, deadline)?;
    let (client_out, server_out) = (output(&mut client), output(&mut server));
    if let Some(path) = &o.log {
        std::fs::write(path, format!("{server_out}{client_out}"))
            .map_err(io_err(format!("writing {}", path.display())))?;
    }
    let last = |t: &str| t.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").to_string();
    match (client_status, server_status) {
        (Some(c), Some(s)) if c.success() && s.success() => {}
        (None, _) | (_, None) => {
            return Err(UcxError::Perftest(format!(
                "still running after {:.0} s (--timeout); stopped both",
                o.timeout.as_secs_f64()
            )));
        }
        (Some(c), Some(s)) => {
            return Err(UcxError::Perftest(format!(
                "client {c}, server {s}; client: {}; server: {}",
                last(&client_out),
                last(&server_out)
            )));
        }
    }
    let (iterations, bandwidth_mb_s) = parse_final(&client_out)
        .ok_or_else(|| UcxError::Perftest(format!("no Final: line in the client's output: {}", last(&client_out))))?;
    Ok(UcxSummary {
        mode: o.mode,
        test,
        memory: memory.into(),
        env,
        perftest: perftest.display().to_string(),
        server_pid,
        client_pid,
        size: o.size,
        iterations,
        bytes: iterations * o.size,
        bandwidth_mb_s,
        elapsed_s: started.elapsed().as_secs_f64(),
        log: o.log.as_ref().map(|p| p.display().to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_line_of_ucx_perftest() {
        // ucx_perftest 1.13.1, tag_bw 1 MiB over tcp on this host.
        let out = "+--------------+\n|    Stage     | # iterations |\nFinal:                    50      9.312  1516.180  1516.180      659.55     659.55         660         660\n";
        assert_eq!(parse_final(out), Some((50, 659.55)));
        assert_eq!(parse_final("no result"), None);
    }

    #[test]
    fn modes_say_what_they_force() {
        assert_eq!(UcxMode::CudaNoIpc.tls(), Some("^cuda_ipc"));
        assert_eq!(UcxMode::Cuda.tls(), None);
        assert!(UcxMode::ALL.iter().all(|m| !m.expected().is_empty()));
    }
}
