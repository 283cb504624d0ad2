//! `gdrtrace drive nixl`: a NIXL transfer between two processes through
//! its UCX backend (READ, WRITE, or a READ then a WRITE), by the Python
//! script this binary carries (`nixl.py`), as disaggregated inference
//! moves a KV cache. NIXL's Python module comes from the machine (the
//! `nixl_cu13`/`nixl_cu12` wheels, or a build of the project).
use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use serde::{Deserialize, Serialize};

use crate::units::parse_size;

/// The workload, carried in the binary.
const SCRIPT: &str = include_str!("nixl.py");

/// Which transfers the initiator makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NixlOp {
    /// Push: the initiator writes its buffer into the target's.
    Write,
    /// Pull: the initiator reads the target's buffer (a decode worker
    /// taking a prefill worker's KV cache).
    Read,
    /// A READ phase, a pause, then a WRITE phase.
    Both,
}

impl NixlOp {
    fn arg(self) -> &'static str {
        match self {
            NixlOp::Write => "WRITE",
            NixlOp::Read => "READ",
            NixlOp::Both => "both",
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct NixlOpts {
    /// READ, WRITE or both (READ, pause, WRITE).
    #[arg(long, value_enum, default_value_t = NixlOp::Write)]
    pub op: NixlOp,
    /// GPU memory (vram) or host memory (dram, numpy buffers: no GPU needed).
    #[arg(long, default_value = "vram", value_parser = ["vram", "dram"])]
    pub memory: String,
    /// Buffer size (K, M, G are powers of 1024).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "32M")]
    pub size: u64,
    /// Transfers per phase.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub iterations: u64,
    /// GPUs of the initiator and the target (the same one twice: both on it).
    #[arg(long, value_name = "INITIATOR,TARGET", default_value = "0,0")]
    pub gpus: String,
    /// The Python interpreter that can import NIXL.
    #[arg(long, value_name = "PATH", default_value = "python3")]
    pub python: PathBuf,
    /// Write both processes' output (UCX's log, with UCX_PROTO_INFO=y) to FILE.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Stop and fail after this long.
    #[arg(long, value_name = "DURATION", value_parser = crate::units::parse_duration, default_value = "300s")]
    pub timeout: Duration,
    /// Also write the summary as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
}

/// One phase of the initiator's transfers.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Phase {
    pub op: String,
    pub transfers: u64,
    pub bytes: u64,
    pub elapsed_s: f64,
    pub gb_s: f64,
    /// READ: the initiator's buffer holds the target's data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verified: Option<bool>,
}

/// One side of the transfer.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Side {
    pub pid: u32,
    pub verified: bool,
    pub phases: Vec<Phase>,
}

/// What ran and what each side said.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NixlSummary {
    pub op: String,
    pub memory: String,
    pub size: u64,
    pub iterations: u64,
    pub target: Side,
    pub initiator: Side,
    pub ok: bool,
}

impl NixlSummary {
    /// Bytes the initiator moved by `op` (`READ` or `WRITE`).
    pub fn bytes_of(&self, op: &str) -> u64 {
        self.initiator
            .phases
            .iter()
            .filter(|p| p.op == op)
            .map(|p| p.bytes)
            .sum()
    }

    pub fn line(&self) -> String {
        let phases: Vec<String> = self
            .initiator
            .phases
            .iter()
            .map(|p| {
                format!(
                    "{} {} x{} at {:.2} GB/s",
                    p.op,
                    crate::units::bytes(p.bytes),
                    p.transfers,
                    p.gb_s
                )
            })
            .collect();
        format!(
            "{} memory: {}; data {}",
            self.memory,
            phases.join(", "),
            if self.ok { "verified" } else { "NOT verified" }
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NixlError {
    #[error("{0}")]
    Io(String),
    #[error("the NIXL workload failed: {0}")]
    Failed(String),
}

/// Whether `python` can import a NIXL module.
pub fn available(python: &Path) -> bool {
    Command::new(python)
        .args([
            "-c",
            "import importlib.util, sys; sys.exit(0 if any(importlib.util.find_spec(m) for m in ('nixl_cu13', 'nixl_cu12', 'nixl')) else 1)",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs the transfer; the summary, or why it failed.
pub fn run(o: &NixlOpts) -> Result<NixlSummary, NixlError> {
    let io = |what: &str, e: std::io::Error| NixlError::Io(format!("{what}: {e}"));
    let dir = crate::output::private_dir("gdrtrace-nixl").map_err(|e| io("creating a work directory", e))?;
    let script = dir.join("nixl.py");
    std::fs::File::create(&script)
        .and_then(|mut f| f.write_all(SCRIPT.as_bytes()))
        .map_err(|e| io("writing the workload script", e))?;
    let (initiator, target) = o.gpus.split_once(',').unwrap_or((&o.gpus, &o.gpus));
    let work = dir.join("run");
    let mut cmd = Command::new(&o.python);
    cmd.arg(&script)
        .args(["run", "--dir"])
        .arg(&work)
        .args(["--op", o.op.arg(), "--memory", &o.memory])
        .args(["--size", &o.size.to_string(), "--iterations", &o.iterations.to_string()])
        .args(["--gpus", &format!("{initiator},{target}")])
        .args(["--timeout", &o.timeout.as_secs().to_string()])
        .stdout(std::process::Stdio::null());
    if o.log.is_some() {
        cmd.env("UCX_PROTO_INFO", "y");
    }
    let status = cmd
        .status()
        .map_err(|e| io(&format!("starting {}", o.python.display()), e))?;
    let text = std::fs::read_to_string(work.join("summary.json")).unwrap_or_default();
    if let Some(log) = &o.log {
        let _ = std::fs::copy(work.join("ucx.log"), log);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let s: NixlSummary = serde_json::from_str(&text)
        .map_err(|_| NixlError::Failed(format!("{} wrote no summary ({status})", o.python.display())))?;
    if let Some(path) = &o.summary {
        std::fs::write(path, serde_json::to_vec_pretty(&s).unwrap_or_default())
            .map_err(|e| io(&format!("writing {}", path.display()), e))?;
    }
    if !status.success() || !s.ok {
        return Err(NixlError::Failed(format!("{status}: {}", s.line())));
    }
    Ok(s)
}
