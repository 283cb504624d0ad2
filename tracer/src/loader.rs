//! Loading the embedded eBPF object: tracefs, load-time globals, map sizes.
use std::{fs, path::PathBuf, sync::OnceLock};

use aya::{Btf, Ebpf, EbpfLoader};
use tracer_common::{RINGBUF_BYTES, WAKEUP_BYTES, filter};

use crate::error::{Error, Result, describe, errno_of};

/// The eBPF object built by `build.rs` (aya-build) and embedded once.
pub const BPF_ELF: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer-ebpf"));

/// Load-time configuration of the eBPF side.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Ring buffer size in bytes: a power of two, at least one page.
    pub ringbuf_bytes: u32,
    /// Trace only processes in the target set (and their descendants).
    pub targets_only: bool,
    /// Ring-buffer fill level (bytes) from which a record wakes the reader.
    pub wakeup_bytes: u32,
    /// Map sizes other than the compiled-in constants, by map name
    /// (`serve --max-targets` sizes `TARGETS`).
    pub max_entries: Vec<(&'static str, u32)>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            ringbuf_bytes: RINGBUF_BYTES,
            targets_only: true,
            wakeup_bytes: WAKEUP_BYTES,
            max_entries: Vec::new(),
        }
    }
}

/// Checks a ring buffer size: the kernel wants a power-of-two multiple of
/// the page size.
pub fn check_ringbuf_size(bytes: u64) -> Result<u32> {
    let page = page_size() as u64;
    if bytes < page || !bytes.is_power_of_two() || bytes > (1 << 30) {
        return Err(Error::Usage(format!(
            "ring buffer size {bytes} must be a power of two between {page} (one page) and 1073741824"
        )));
    }
    Ok(bytes as u32)
}

pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 { v as usize } else { 4096 }
}

/// Where tracefs is mounted, mounting it if needed (it is not mounted by
/// default on the minimal kernels these machines run).
pub fn tracefs() -> Result<PathBuf> {
    for dir in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        if PathBuf::from(dir).join("events").is_dir() {
            return Ok(dir.into());
        }
    }
    let target = c"/sys/kernel/tracing";
    // SAFETY: constant, NUL-terminated arguments.
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => Error::Permission(format!("cannot read or mount tracefs: {e}")),
            _ => Error::io("mounting tracefs on /sys/kernel/tracing", e),
        });
    }
    Ok("/sys/kernel/tracing".into())
}

/// Byte offset of `field` in a tracepoint's record, from its format file.
pub fn tracepoint_field_offset(category: &str, name: &str, field: &str) -> Result<u32> {
    let path = tracefs()?.join("events").join(category).join(name).join("format");
    let text = fs::read_to_string(&path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    parse_field_offset(&text, field).ok_or_else(|| {
        Error::Usage(format!(
            "tracepoint {category}/{name} has no field {field} on this kernel"
        ))
    })
}

/// Parses `field:pid_t child_pid; offset:20; size:4;` lines (tab-separated).
pub fn parse_field_offset(format: &str, field: &str) -> Option<u32> {
    format.lines().find_map(|line| {
        let decl = line.trim().strip_prefix("field:")?;
        let (decl, rest) = decl.split_once(';')?;
        let name = decl.split_whitespace().last()?.split('[').next()?;
        if name != field {
            return None;
        }
        rest.split(';')
            .find_map(|kv| kv.trim().strip_prefix("offset:")?.parse().ok())
    })
}

/// Raises RLIMIT_MEMLOCK where allowed. Kernels since 5.11 account BPF
/// memory by cgroup, so failure (no CAP_SYS_RESOURCE) is not fatal.
fn raise_memlock() {
    let lim = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: plain syscall on a valid struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) } != 0 {
        log::debug!("setrlimit(RLIMIT_MEMLOCK) refused; relying on memcg accounting");
    }
}

/// Loads the embedded object with the given options.
pub fn load(opts: &LoadOptions) -> Result<Ebpf> {
    raise_memlock();
    let ringbuf = check_ringbuf_size(opts.ringbuf_bytes as u64)?;
    let fork_off = tracepoint_field_offset("sched", "sched_process_fork", "child_pid")?;
    let mode = if opts.targets_only {
        filter::TARGETS
    } else {
        filter::ALL
    };
    // Wake the reader before the buffer is a quarter full, whatever its size.
    let wakeup = opts.wakeup_bytes.min(ringbuf / 4).max(1);
    let mut loader = EbpfLoader::new();
    if let Ok(btf) = vmlinux_btf() {
        loader.btf(btf);
    }
    for (name, n) in &opts.max_entries {
        loader.map_max_entries(name, *n);
    }
    loader
        .map_max_entries("EVENTS", ringbuf)
        .override_global("WAKEUP_AT", &wakeup, true)
        .override_global("FILTER_MODE", &mode, true)
        .override_global("FORK_CHILD_PID_OFFSET", &fork_off, true)
        .load(BPF_ELF)
        .map_err(|e| match errno_of(&e) {
            Some(libc::EPERM) | Some(libc::EACCES) => Error::Permission(crate::error::describe(&e)),
            // A seccomp profile's default action (podman's, containers/common)
            // answers ENOSYS for a call it does not list.
            Some(libc::ENOSYS) => Error::Permission(format!(
                "bpf() returned ENOSYS: a seccomp profile refuses it, or the kernel has no BPF syscall: {}",
                crate::error::describe(&e)
            )),
            _ => Error::Load(e),
        })
}

/// A program of the loaded object, by name, as its type (`UProbe`,
/// `TracePoint`...): one line saying what is wrong otherwise.
pub fn program<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T, String>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    let p = ebpf
        .program_mut(name)
        .ok_or_else(|| Error::MissingProgram(name.to_string()).to_string())?;
    p.try_into().map_err(|e: aya::programs::ProgramError| describe(&e))
}

/// The kernel's BTF, parsed once a process (it does not change while the
/// kernel runs): every session of a trace (its own, the trap-cost
/// calibration's) and the eBPF loader share it.
pub fn vmlinux_btf() -> Result<&'static Btf, &'static str> {
    static BTF: OnceLock<Result<Btf, String>> = OnceLock::new();
    BTF.get_or_init(|| Btf::from_sys_fs().map_err(|e| describe(&e)))
        .as_ref()
        .map_err(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fork_offsets_of_both_layouts() {
        let new = "\tfield:__data_loc char[] parent_comm;\toffset:8;\tsize:4;\tsigned:0;\n\tfield:pid_t parent_pid;\toffset:12;\tsize:4;\tsigned:1;\n\tfield:__data_loc char[] child_comm;\toffset:16;\tsize:4;\tsigned:0;\n\tfield:pid_t child_pid;\toffset:20;\tsize:4;\tsigned:1;\n";
        let old = "\tfield:char parent_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\tfield:pid_t parent_pid;\toffset:24;\tsize:4;\tsigned:1;\n\tfield:char child_comm[16];\toffset:28;\tsize:16;\tsigned:0;\n\tfield:pid_t child_pid;\toffset:44;\tsize:4;\tsigned:1;\n";
        assert_eq!(parse_field_offset(new, "child_pid"), Some(20));
        assert_eq!(parse_field_offset(old, "child_pid"), Some(44));
        assert_eq!(parse_field_offset(old, "child_comm"), Some(28));
        assert_eq!(parse_field_offset(old, "nope"), None);
    }

    #[test]
    fn ringbuf_size_must_be_power_of_two() {
        assert!(check_ringbuf_size(1 << 20).is_ok());
        assert!(check_ringbuf_size(3 << 20).is_err());
        assert!(check_ringbuf_size(1024).is_err());
    }
}
