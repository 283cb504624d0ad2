//! Host facts, on the ground floor: the kernel, lockdown, modules, IOMMU,
//! ACS, NVLink, GPUs and NICs. Read once per run and passed down to whoever
//! judges or reports; a recording carries them, so replay and `explain`
//! judge with the facts of the machine that traced.
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The kernel and its lockdown mode (the report's `host`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Host {
    pub kernel: String,
    pub lockdown: String,
}

/// The kernel release and lockdown mode of this machine (mounts securityfs
/// where it is not mounted).
pub fn host() -> Host {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let path = "/sys/kernel/security/lockdown";
    if !std::path::Path::new(path).exists() {
        // securityfs is not mounted on minimal systems; mounting it is harmless.
        // SAFETY: constant, NUL-terminated arguments.
        unsafe {
            libc::mount(
                c"securityfs".as_ptr(),
                c"/sys/kernel/security".as_ptr(),
                c"securityfs".as_ptr(),
                0,
                std::ptr::null(),
            )
        };
    }
    let lockdown = std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .find(|w| w.starts_with('['))
                .map(|w| w.trim_matches(['[', ']']).to_string())
        })
        .unwrap_or_else(|| "unknown (no /sys/kernel/security/lockdown)".into());
    Host { kernel, lockdown }
}

/// Monotonic time (ns), the clock of event `start_ns`.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The CPU time process `pid` has run, all its threads, in nanoseconds:
/// its process CPU clock (`clock_getcpuclockid`), which the kernel reads
/// for any process, with no permission over it; None once it has exited.
pub fn process_cpu_ns(pid: u32) -> Option<u64> {
    let mut clock: libc::clockid_t = 0;
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointers to a clockid_t and a timespec.
    let ok = unsafe {
        libc::clock_getcpuclockid(pid as libc::pid_t, &mut clock) == 0 && libc::clock_gettime(clock, &mut ts) == 0
    };
    ok.then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// When process `pid` started, on [`monotonic_ns`]'s clock, rounded down
/// to the kernel's clock tick (`/proc/PID/stat`'s `starttime`, on
/// `CLOCK_BOOTTIME`): it started at or after that.
pub fn process_start_ns(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may hold spaces and parentheses:
    // `state` is field 3, `starttime` field 22.
    let ticks: u64 = stat.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()?;
    // SAFETY: sysconf reads a constant.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .ok()
        .filter(|h| *h > 0)?;
    let mut boot = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut boot) };
    let mono = monotonic_ns();
    let boot = boot.tv_sec as u64 * 1_000_000_000 + boot.tv_nsec as u64;
    // Time spent suspended is on the boot clock only.
    (ticks * (1_000_000_000 / hz)).checked_sub(boot.saturating_sub(mono))
}

/// Kernel modules whose presence explain rules look at.
pub const MODULES_OF_INTEREST: &[&str] = &[
    "nvidia",
    "nvidia_uvm",
    "nvidia_peermem",
    "nv_peer_mem",
    "gdrdrv",
    "ib_core",
    "ib_uverbs",
    "mlx5_core",
    "mlx5_ib",
    "rdma_rxe",
    "siw",
];

/// IOMMU state: groups present and the kernel command-line switches.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Iommu {
    /// Entries of `/sys/kernel/iommu_groups` (0: no IOMMU translation).
    pub groups: u64,
    /// `iommu=`, `intel_iommu=`, `amd_iommu=` from `/proc/cmdline`.
    pub cmdline: Vec<String>,
}

/// Facts of the machine the explain rules need, read when tracing started.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct HostFacts {
    /// NVLink between GPUs (`topo`), None when unknown.
    #[serde(default)]
    pub nvlink: Option<bool>,
    /// `/sys/kernel/mm/memory_peers` exists (a peer-memory client is registered).
    #[serde(default)]
    pub memory_peers: bool,
    /// Its entries (e.g. `nv_mem`).
    #[serde(default)]
    pub memory_peer_clients: Vec<String>,
    /// Loaded modules among [`MODULES_OF_INTEREST`] (`/proc/modules`).
    #[serde(default)]
    pub modules: Vec<String>,
    #[serde(default)]
    pub iommu: Iommu,
    /// PCI bridges with ACS request/completion redirect enabled (these send
    /// peer-to-peer traffic up to the root complex).
    #[serde(default)]
    pub acs_redirect: Vec<String>,
    /// GPU count and RDMA devices.
    #[serde(default)]
    pub gpus: u64,
    #[serde(default)]
    pub rdma_devices: Vec<String>,
    /// GPU-to-NIC PCIe path classes (`PIX`, `PXB`, `PHB`, `NODE`, `SYS`)
    /// where topology knows them: `[gpu, nic, class]`.
    #[serde(default)]
    pub gpu_nic_paths: Vec<[String; 3]>,
    /// The host name and boot id: with a process's `NCCL_HOSTID` (which
    /// replaces both), the inputs of NCCL's host hash (`getHostHash`:
    /// `$(hostname)$(cat /proc/sys/kernel/random/boot_id)`), which decides
    /// whether two ranks are on one host. Empty in reports older than them.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub boot_id: String,
    /// GPUDirect Storage's kernel side (None in reports older than it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gds: Option<GdsHost>,
}

/// nvidia-fs on this machine: what decides whether cuFile can leave compat mode.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct GdsHost {
    /// `nvidia_fs` in `/proc/modules`.
    pub nvidia_fs: bool,
    /// Its device nodes (`/dev/nvidia-fs0` ...).
    pub devices: Vec<String>,
    /// `/proc/driver/nvidia-fs/version`, where readable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

impl GdsHost {
    /// Reads it from this machine (`loaded`: the names in /proc/modules).
    pub fn read(loaded: &[&str]) -> Self {
        let mut devices: Vec<String> = crate::topo::dir_names(Path::new("/dev"))
            .into_iter()
            .filter(|n| n.starts_with("nvidia-fs"))
            .map(|n| format!("/dev/{n}"))
            .collect();
        devices.sort();
        GdsHost {
            nvidia_fs: loaded.contains(&"nvidia_fs"),
            devices,
            version: std::fs::read_to_string("/proc/driver/nvidia-fs/version")
                .ok()
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty()),
        }
    }

    /// Whether nvidia-fs is there to drive GPUDirect Storage.
    pub fn present(&self) -> bool {
        self.nvidia_fs || !self.devices.is_empty()
    }
}

impl HostFacts {
    /// Reads the facts from this machine.
    pub fn read() -> Self {
        let topo = crate::topo::discover();
        let modules_text = std::fs::read_to_string("/proc/modules").unwrap_or_default();
        let loaded: Vec<&str> = modules_text
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        let list = |dir: &str| crate::topo::dir_names(Path::new(dir));
        let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
        let mut gpu_nic_paths = Vec::new();
        for l in &topo.links {
            let (a_gpu, b_gpu) = (l.a.starts_with("GPU"), l.b.starts_with("GPU"));
            if a_gpu != b_gpu && !l.nvlink {
                let (g, n) = if a_gpu { (&l.a, &l.b) } else { (&l.b, &l.a) };
                gpu_nic_paths.push([g.clone(), n.clone(), l.kind.clone()]);
            }
        }
        HostFacts {
            nvlink: topo.nvlink(),
            memory_peers: Path::new("/sys/kernel/mm/memory_peers").exists(),
            memory_peer_clients: list("/sys/kernel/mm/memory_peers"),
            modules: MODULES_OF_INTEREST
                .iter()
                .filter(|m| loaded.contains(m))
                .map(|m| m.to_string())
                .collect(),
            iommu: Iommu {
                groups: list("/sys/kernel/iommu_groups").len() as u64,
                cmdline: cmdline
                    .split_whitespace()
                    .filter(|w| w.starts_with("iommu=") || w.starts_with("intel_iommu=") || w.starts_with("amd_iommu="))
                    .map(String::from)
                    .collect(),
            },
            acs_redirect: acs_redirect_bridges(),
            gpus: topo.gpus.len() as u64,
            rdma_devices: list("/sys/class/infiniband"),
            gpu_nic_paths,
            hostname: hostname(),
            boot_id: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            gds: Some(GdsHost::read(&loaded)),
        }
    }
}

/// This machine's host name (`gethostname`, as NCCL reads it).
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: a valid buffer and its length.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return String::new();
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// PCI bridges whose ACS control has request or completion redirect set,
/// from the extended capabilities in sysfs config space (readable by root).
fn acs_redirect_bridges() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/sys/bus/pci/devices") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for dev in dir.flatten() {
        let class = std::fs::read_to_string(dev.path().join("class")).unwrap_or_default();
        if !class.trim().starts_with("0x0604") {
            continue;
        }
        let Ok(cfg) = std::fs::read(dev.path().join("config")) else {
            continue;
        };
        if acs_redirects(&cfg) {
            out.push(dev.file_name().to_string_lossy().into_owned());
        }
    }
    out.sort();
    out
}

/// Whether a PCIe config space (4096 bytes, as root reads it from sysfs)
/// has an ACS extended capability with request or completion redirect set
/// (decoded by `topo::pci`, which `gdrtrace topo` shows).
pub fn acs_redirects(cfg: &[u8]) -> bool {
    crate::topo::pci::acs_from_config(cfg)
        .ok()
        .flatten()
        .is_some_and(|acs| acs.redirects_p2p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acs_control_in_extended_config_space() {
        // AER at 0x100 (next 0x148), ACS at 0x148 with control at 0x14e.
        let mut cfg = vec![0u8; 4096];
        cfg[0x100..0x104].copy_from_slice(&(0x0001u32 | 1 << 16 | 0x148 << 20).to_le_bytes());
        cfg[0x148..0x14c].copy_from_slice(&(0x000du32 | 1 << 16).to_le_bytes());
        // SrcValid | ReqRedir | CmpltRedir | UpstreamFwd, as `lspci -vvv` shows on a blocking bridge.
        cfg[0x14e..0x150].copy_from_slice(&0x001du16.to_le_bytes());
        assert!(acs_redirects(&cfg));
        cfg[0x14e..0x150].copy_from_slice(&0x0011u16.to_le_bytes());
        assert!(!acs_redirects(&cfg), "SrcValid and UpstreamFwd alone do not redirect");
        // Non-root readers get 256 bytes: no extended space, no answer.
        assert!(!acs_redirects(&cfg[..256]));
    }
}
