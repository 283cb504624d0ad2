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
/// `NVSHMEM_*`, `CUFILE_*`) of a process's environment, as it was at exec.
pub fn comm_env(pid: u32) -> std::collections::BTreeMap<String, String> {
    let Ok(raw) = fs::read(format!("/proc/{pid}/environ")) else {
        return Default::default();
    };
    raw.split(|b| *b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok()?.split_once('='))
        .filter(|(k, _)| {
            ["NCCL_", "CUDA_", "UCX_", "NVSHMEM_", "CUFILE_"]
                .iter()
                .any(|p| k.starts_with(p))
        })
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

/// A file a process has open, as `/proc` shows it: what the file paths of
/// GPUDirect Storage are judged by (its filesystem, its device, whether it
/// was opened `O_DIRECT`, whether it is an nvidia-fs device).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct OpenFile {
    /// The path (`/proc/PID/fd/N`'s link), inside the process's mount namespace.
    pub path: String,
    /// The file's identity: its device (`major:minor`) and inode.
    pub dev: String,
    pub ino: u64,
    /// Its mount (`/proc/PID/mountinfo`): filesystem type, source device,
    /// mount point and options (mount and superblock).
    pub fs_type: String,
    pub mount_source: String,
    pub mount_point: String,
    pub mount_options: String,
    /// The open flags (`/proc/PID/fdinfo/N`, octal there).
    pub flags: u32,
    /// A character device (`/dev/nvidia-fs0`: nvidia-fs's).
    pub char_device: bool,
    /// An nvidia-fs device: a character device named `nvidia-fsN`, or of
    /// the major number `/proc/devices` gives `nvidia-fs`.
    pub nvfs: bool,
}

/// `O_DIRECT` on x86_64 (`include/uapi/asm-generic/fcntl.h`: 040000).
pub const O_DIRECT: u32 = 0o40000;

impl OpenFile {
    /// The file's identity in reports and windows: `major:minor:inode`.
    pub fn key(&self) -> String {
        format!("{}:{}", self.dev, self.ino)
    }

    pub fn o_direct(&self) -> bool {
        self.flags & O_DIRECT != 0
    }
}

/// The file behind `fd` of process `pid`, while it is open.
pub fn open_file(pid: u32, fd: i32) -> Option<OpenFile> {
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
    let link = format!("/proc/{pid}/fd/{fd}");
    let path = fs::read_link(&link).ok()?.to_string_lossy().into_owned();
    let meta = fs::metadata(&link).ok()?;
    let fdinfo = fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).ok()?;
    let field = |k: &str| fdinfo.lines().find_map(|l| l.strip_prefix(k).map(str::trim));
    let flags = field("flags:")
        .and_then(|v| u32::from_str_radix(v, 8).ok())
        .unwrap_or(0);
    let mnt_id = field("mnt_id:").unwrap_or("");
    let mountinfo = fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap_or_default();
    let mount = mountinfo
        .lines()
        .map(parse_mountinfo)
        .find(|m| m.as_ref().is_some_and(|m| m.id == mnt_id))
        .flatten()
        .unwrap_or_default();
    let dev = meta.dev();
    let char_device = meta.file_type().is_char_device();
    let name = path.rsplit('/').next().unwrap_or("");
    let nvfs_name = name
        .strip_prefix("nvidia-fs")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    let nvfs = char_device && (nvfs_name || char_major("nvidia-fs") == Some(libc::major(meta.rdev())));
    Some(OpenFile {
        path,
        dev: format!("{}:{}", libc::major(dev), libc::minor(dev)),
        ino: meta.ino(),
        fs_type: mount.fs_type,
        mount_source: mount.source,
        mount_point: mount.point,
        mount_options: mount.options,
        flags,
        char_device,
        nvfs,
    })
}

/// One line of `/proc/PID/mountinfo` (proc(5)): `36 35 98:0 /mnt1
/// /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mount {
    pub id: String,
    pub point: String,
    pub fs_type: String,
    pub source: String,
    /// Mount options, then the superblock's (`data=ordered` is there).
    pub options: String,
}

pub fn parse_mountinfo(line: &str) -> Option<Mount> {
    let (left, right) = line.split_once(" - ")?;
    let l: Vec<&str> = left.split_whitespace().collect();
    let r: Vec<&str> = right.split_whitespace().collect();
    Some(Mount {
        id: l.first()?.to_string(),
        point: l.get(4)?.to_string(),
        fs_type: r.first()?.to_string(),
        source: r.get(1).unwrap_or(&"").to_string(),
        options: format!("{},{}", l.get(5).unwrap_or(&""), r.get(2).unwrap_or(&"")),
    })
}

/// The major number `/proc/devices` gives a character driver.
pub fn char_major(driver: &str) -> Option<u32> {
    let text = fs::read_to_string("/proc/devices").ok()?;
    text.lines()
        .skip_while(|l| !l.starts_with("Character devices"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .find_map(|l| {
            let (n, name) = l.trim().split_once(' ')?;
            (name.trim() == driver).then(|| n.parse().ok()).flatten()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file behind an fd of this process: its identity, mount and flags.
    #[test]
    fn open_files_by_fd() {
        use std::os::unix::{fs::MetadataExt as _, io::AsRawFd as _};
        let dir = std::env::temp_dir().join(format!("gdrtrace-openfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let path = dir.join("data.bin");
        let f = std::fs::File::create(&path).expect("a file");
        let o = open_file(std::process::id(), f.as_raw_fd()).expect("the open file");
        let meta = std::fs::metadata(&path).expect("its metadata");
        assert_eq!(o.ino, meta.ino());
        assert_eq!(o.path, path.canonicalize().expect("a real path").to_string_lossy());
        assert!(!o.fs_type.is_empty(), "{o:?}");
        assert!(!o.o_direct() && !o.nvfs && !o.char_device, "{o:?}");
        assert_eq!(open_file(std::process::id(), 1 << 20), None, "no such fd");
        let _ = std::fs::remove_dir_all(&dir);
        let m = parse_mountinfo("36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue")
            .expect("a mountinfo line");
        assert_eq!(
            (m.id.as_str(), m.point.as_str(), m.fs_type.as_str(), m.source.as_str()),
            ("36", "/mnt/parent", "ext3", "/dev/root")
        );
        assert_eq!(m.options, "rw,noatime,rw,errors=continue");
    }

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
