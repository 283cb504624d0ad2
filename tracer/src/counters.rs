//! Counter-based signals read from procfs: system-wide page pins
//! (`/proc/vmstat` `nr_foll_pin_acquired/released`) and per-process pinned
//! memory (`VmPin` in `/proc/PID/status`). They need no probe at all, so they
//! work on every kernel; the report marks them as counters, not probes.
use std::fs;

use serde::{Deserialize, Serialize};

/// A snapshot of the system-wide pin counters (pages).
#[derive(Clone, Copy, Debug, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct FollPin {
    pub acquired: u64,
    pub released: u64,
}

impl FollPin {
    pub fn read() -> Option<Self> {
        parse_vmstat(&fs::read_to_string("/proc/vmstat").ok()?)
    }

    /// Difference `later - self`.
    pub fn delta(&self, later: &FollPin) -> FollPin {
        FollPin {
            acquired: later.acquired.saturating_sub(self.acquired),
            released: later.released.saturating_sub(self.released),
        }
    }
}

pub fn parse_vmstat(text: &str) -> Option<FollPin> {
    let mut acquired = None;
    let mut released = None;
    for line in text.lines() {
        let mut it = line.split_whitespace();
        match (it.next(), it.next().and_then(|v| v.parse().ok())) {
            (Some("nr_foll_pin_acquired"), Some(v)) => acquired = Some(v),
            (Some("nr_foll_pin_released"), Some(v)) => released = Some(v),
            _ => {}
        }
    }
    Some(FollPin {
        acquired: acquired?,
        released: released?,
    })
}

/// `VmPin` of a process in KiB, if it is alive and the kernel reports it.
pub fn vm_pin_kib(pid: u32) -> Option<u64> {
    parse_status_kib(&fs::read_to_string(format!("/proc/{pid}/status")).ok()?, "VmPin:")
}

pub fn parse_status_kib(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.split_whitespace().next()?.parse().ok())
}

/// Process CPU time (user + system) of a process, in seconds.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((utime + stime) / hz.max(1.0))
}

/// The fields of `/proc/PID/stat` after the command name (state first),
/// or None when the process is gone.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .map(str::to_string)
            .collect(),
    )
}

/// Whether a process still runs: it exists and is not a zombie (exited,
/// waiting for its parent to reap it) or dead.
pub fn running(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|f| !matches!(f.first().map(String::as_str), Some("Z" | "X" | "x")))
}

/// Whether a task is a kernel thread (`PF_KTHREAD` in its flags).
pub fn kernel_thread(pid: u32) -> bool {
    const PF_KTHREAD: u64 = 0x0020_0000;
    stat_fields(pid)
        .and_then(|f| f.get(6)?.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_KTHREAD != 0)
}

/// Command name of a process.
pub fn comm(pid: u32) -> Option<String> {
    Some(fs::read_to_string(format!("/proc/{pid}/comm")).ok()?.trim().to_string())
}

/// Thread-group id of a task (for telling threads from processes).
pub fn tgid(tid: u32) -> Option<u32> {
    parse_status_kib(&fs::read_to_string(format!("/proc/{tid}/status")).ok()?, "Tgid:").map(|v| v as u32)
}

/// The communication-library variables (`NCCL_*`, `CUDA_*`, `UCX_*`,
/// `NVSHMEM_*`) of a process's environment, as it was at exec.
pub fn comm_env(pid: u32) -> std::collections::BTreeMap<String, String> {
    let Ok(raw) = fs::read(format!("/proc/{pid}/environ")) else {
        return Default::default();
    };
    raw.split(|b| *b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok()?.split_once('='))
        .filter(|(k, _)| ["NCCL_", "CUDA_", "UCX_", "NVSHMEM_"].iter().any(|p| k.starts_with(p)))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A process's address space (`/proc/PID/maps`, with VmPin), when it maps
/// NVIDIA devices: what its CUDA state was before the probes were live.
pub fn address_space(pid: u32) -> Option<crate::model::AddressSpace> {
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    crate::model::AddressSpace::parse(&maps, vm_pin_kib(pid))
}

/// Parent pid of a process (`/proc/PID/stat`).
pub fn ppid(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// Every process with a CUDA context, this one aside: who could be moving
/// bytes over the GPUs' links. A CUDA context opens (and maps) the UVM
/// device `/dev/nvidia-uvm`; daemons that only watch the GPUs
/// (nvidia-persistenced, NVML clients) open `/dev/nvidiactl` and
/// `/dev/nvidiaN` but not it, and move nothing.
pub fn gpu_processes() -> Vec<GpuProcess> {
    const UVM: &str = "/dev/nvidia-uvm";
    let me = std::process::id();
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let uvm_fd = |pid: u32| {
        fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
            fds.flatten()
                .any(|fd| fs::read_link(fd.path()).is_ok_and(|t| t.as_os_str() == UVM))
        })
    };
    let mut out: Vec<GpuProcess> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains(UVM)) || uvm_fd(*pid))
        .map(|pid| GpuProcess {
            pid,
            parent: ppid(pid),
            comm: comm(pid).unwrap_or_default(),
        })
        .collect();
    out.sort_by_key(|g| g.pid);
    out
}

/// A process that had a CUDA context when the window closed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<u32>,
    #[serde(default)]
    pub comm: String,
}

/// GPU interconnect traffic over the traced window (machine-wide).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuLinks {
    /// Whether NVLink joins the local GPUs (topology).
    pub nvlink_between_gpus: bool,
    /// NVLink data bytes (tx, summed over GPUs and links) in the window.
    pub nvlink_bytes: u64,
    /// RDMA NICs on the machine (a NIC could carry collectives over PCIe).
    pub rdma_nics: usize,
    /// Processes with a CUDA context (`/dev/nvidia-uvm` mapped or open) at
    /// the end of the window, the tracer aside: whoever else could have
    /// moved the bytes the counters show. None: not read (reports and
    /// recordings made before this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_processes: Option<Vec<GpuProcess>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vmstat_and_status() {
        let v = parse_vmstat("nr_free_pages 1\nnr_foll_pin_acquired 120\nnr_foll_pin_released 100\n");
        assert_eq!(
            v,
            Some(FollPin {
                acquired: 120,
                released: 100
            })
        );
        assert_eq!(parse_vmstat("nr_free_pages 1\n"), None);
        assert_eq!(parse_status_kib("Name:\tx\nVmPin:\t     256 kB\n", "VmPin:"), Some(256));
    }

    #[test]
    fn running_zombies_and_kernel_threads() {
        assert!(running(std::process::id()));
        assert!(!kernel_thread(std::process::id()));
        // pid 2 is kthreadd on Linux, unless this runs in a pid namespace.
        if comm(2).as_deref() == Some("kthreadd") {
            assert!(kernel_thread(2));
        }
        let mut child = std::process::Command::new("true").spawn().expect("spawning true");
        let pid = child.id();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while running(pid) && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!running(pid), "an exited, unreaped child is a zombie, not running");
        assert!(
            std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "still listed until reaped"
        );
        child.wait().expect("reaping");
    }
}
