//! `gdrtrace drive pin-churn`: CPU-only pinning churn. Registers and
//! unregisters io_uring fixed buffers (the kernel pins their pages with
//! `pin_user_pages`, io_uring/rsrc.c, the path RDMA memory registration
//! takes too) and does O_DIRECT file I/O (direct I/O pins the user pages for
//! the duration of the transfer on kernels since 6.x).
use std::{
    fs::OpenOptions,
    io,
    os::unix::fs::{FileExt as _, OpenOptionsExt as _},
    path::PathBuf,
    time::Instant,
};

use io_uring::IoUring;
use serde::Serialize;

use crate::{
    error::{Error, Result},
    loader::page_size,
};

#[derive(Clone, Debug, clap::Args)]
pub struct PinChurnOpts {
    /// Register/unregister cycles.
    #[arg(long, default_value_t = 200)]
    pub iterations: u32,
    /// Buffers per registration.
    #[arg(long, default_value_t = 4)]
    pub buffers: u32,
    /// Pages per buffer.
    #[arg(long, default_value_t = 16)]
    pub pages: u32,
    /// MiB of O_DIRECT writes and reads (0 to skip).
    #[arg(long, default_value_t = 8)]
    pub odirect_mib: u32,
    /// Directory for the O_DIRECT file (must support O_DIRECT; tmpfs does not).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Also write the summary as JSON to this file.
    #[arg(long)]
    pub summary: Option<PathBuf>,
}

#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct PinChurnSummary {
    pub pid: u32,
    pub registrations: u64,
    pub unregistrations: u64,
    pub buffers_per_registration: u32,
    pub pages_per_buffer: u32,
    pub page_size: u64,
    pub pages_registered: u64,
    pub register_ns_total: u64,
    /// The 99th percentile of the workload's own timing of each buffer
    /// registration (`io_uring_register(IORING_REGISTER_BUFFERS)`), ns:
    /// what a tracer's registration latency is checked against.
    #[serde(default)]
    pub register_p99_ns: u64,
    /// The same over every `io_uring_register` call it made (registrations
    /// and unregistrations), ns.
    #[serde(default)]
    pub io_uring_register_p99_ns: u64,
    /// Both again, on this thread's CPU clock (`CLOCK_THREAD_CPUTIME_ID`):
    /// without the time the thread waited for a CPU around the call. On a
    /// busy machine the wall-clock tail is that wait (a tracer woken by the
    /// call's record can take the CPU as the call returns), which a
    /// tracer's in-kernel timing of the call rightly leaves out.
    #[serde(default)]
    pub register_cpu_p99_ns: u64,
    #[serde(default)]
    pub io_uring_register_cpu_p99_ns: u64,
    pub odirect_ios: u64,
    pub odirect_bytes: u64,
    pub odirect_pages: u64,
    pub odirect_note: Option<String>,
    pub elapsed_s: f64,
    /// CPU time the process spent (user + system, the kernel's syscall and
    /// probe paths included): unlike `elapsed_s`, not inflated by waiting
    /// for a CPU on a busy machine.
    #[serde(default)]
    pub cpu_s: f64,
}

/// CPU time of the calling thread so far (`CLOCK_THREAD_CPUTIME_ID`), ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time of this process so far (`CLOCK_PROCESS_CPUTIME_ID`), seconds.
pub fn process_cpu_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

impl PinChurnSummary {
    pub fn line(&self) -> String {
        format!(
            "pin-churn: pid={} registrations={} unregistrations={} buffers_per_registration={} pages_per_buffer={} pages_registered={} odirect_ios={} odirect_pages={} register_p99_ns={} io_uring_register_p99_ns={} register_cpu_p99_ns={} io_uring_register_cpu_p99_ns={}",
            self.pid,
            self.registrations,
            self.unregistrations,
            self.buffers_per_registration,
            self.pages_per_buffer,
            self.pages_registered,
            self.odirect_ios,
            self.odirect_pages,
            self.register_p99_ns,
            self.io_uring_register_p99_ns,
            self.register_cpu_p99_ns,
            self.io_uring_register_cpu_p99_ns
        )
    }
}

/// Page-aligned, zeroed, owned memory.
struct Aligned {
    ptr: *mut u8,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Result<Self> {
        let mut p = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; alignment is a power of two.
        let rc = unsafe { libc::posix_memalign(&mut p, page_size(), len) };
        if rc != 0 {
            return Err(Error::io("posix_memalign", io::Error::from_raw_os_error(rc)));
        }
        // SAFETY: freshly allocated `len` bytes; touching faults pages in.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0xA5, len) };
        Ok(Self { ptr: p.cast(), len })
    }
    fn slice_mut(&mut self) -> &mut [u8] {
        // SAFETY: owned allocation of `len` bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated by posix_memalign.
        unsafe { libc::free(self.ptr.cast()) };
    }
}

pub fn run(opts: &PinChurnOpts) -> Result<PinChurnSummary> {
    if opts.buffers == 0 || opts.pages == 0 {
        return Err(Error::Usage("--buffers and --pages must be at least 1".into()));
    }
    // Checked before the churn: a named directory that cannot hold the
    // O_DIRECT file fails the run, never skips its part silently.
    if let Some(dir) = &opts.dir
        && opts.odirect_mib > 0
        && !dir.is_dir()
    {
        return Err(Error::Usage(format!(
            "--dir {}: {}",
            dir.display(),
            if dir.exists() {
                "not a directory"
            } else {
                "no such directory"
            }
        )));
    }
    let page = page_size();
    check_memory(opts, page as u64, mem_available())?;
    let started = Instant::now();
    let cpu_started = process_cpu_s();
    let mut s = PinChurnSummary {
        pid: std::process::id(),
        buffers_per_registration: opts.buffers,
        pages_per_buffer: opts.pages,
        page_size: page as u64,
        ..Default::default()
    };
    let ring = IoUring::new(8).map_err(|e| Error::io("io_uring_setup", e))?;
    let mut bufs: Vec<Aligned> = (0..opts.buffers)
        .map(|_| Aligned::new(opts.pages as usize * page))
        .collect::<Result<_>>()?;
    let iovecs: Vec<libc::iovec> = bufs
        .iter_mut()
        .map(|b| libc::iovec {
            iov_base: b.ptr.cast(),
            iov_len: b.len,
        })
        .collect();
    // Wall and thread-CPU time of each call: (registrations, unregistrations).
    let mut wall: (Vec<u64>, Vec<u64>) = Default::default();
    let mut cpu: (Vec<u64>, Vec<u64>) = Default::default();
    for _ in 0..opts.iterations {
        let (t, c) = (Instant::now(), thread_cpu_ns());
        // SAFETY: the buffers outlive their registration (unregistered below).
        unsafe { ring.submitter().register_buffers(&iovecs) }
            .map_err(|e| Error::io("io_uring_register(IORING_REGISTER_BUFFERS)", e))?;
        let (ns, cpu_ns) = (t.elapsed().as_nanos() as u64, thread_cpu_ns() - c);
        wall.0.push(ns);
        cpu.0.push(cpu_ns);
        s.register_ns_total += ns;
        s.registrations += 1;
        s.pages_registered += opts.buffers as u64 * opts.pages as u64;
        let (t, c) = (Instant::now(), thread_cpu_ns());
        ring.submitter()
            .unregister_buffers()
            .map_err(|e| Error::io("io_uring_register(IORING_UNREGISTER_BUFFERS)", e))?;
        wall.1.push(t.elapsed().as_nanos() as u64);
        cpu.1.push(thread_cpu_ns() - c);
        s.unregistrations += 1;
    }
    let both = |v: &(Vec<u64>, Vec<u64>)| {
        let mut all = v.0.clone();
        all.extend(&v.1);
        (p99(&mut v.0.clone()), p99(&mut all))
    };
    (s.register_p99_ns, s.io_uring_register_p99_ns) = both(&wall);
    (s.register_cpu_p99_ns, s.io_uring_register_cpu_p99_ns) = both(&cpu);
    drop(ring);
    if opts.odirect_mib > 0 {
        odirect(opts, &mut bufs[0], &mut s)?;
    }
    s.elapsed_s = started.elapsed().as_secs_f64();
    s.cpu_s = process_cpu_s() - cpu_started;
    if let Some(path) = &opts.summary {
        let text = serde_json::to_string_pretty(&s).map_err(|e| Error::Workload(e.to_string()))?;
        std::fs::write(path, text).map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    }
    Ok(s)
}

/// At most this many buffers in one registration (io_uring/rsrc.c:
/// `IORING_MAX_REG_BUFFERS`, 1 << 14).
const MAX_REG_BUFFERS: u64 = 1 << 14;
/// At most this much per buffer (io_uring/rsrc.c, `io_buffer_validate`: SZ_1G).
const MAX_BUFFER_BYTES: u64 = 1 << 30;

/// `MemAvailable` of /proc/meminfo in bytes (None: unknown).
fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// Refuses (exit 2) a request the kernel would refuse or the machine cannot
/// hold, before anything is allocated: the buffers are faulted in and
/// pinned, so a request past the available memory would run the machine
/// out of memory rather than fail.
fn check_memory(opts: &PinChurnOpts, page: u64, available: Option<u64>) -> Result<()> {
    let unit = crate::units::bytes_limit;
    if u64::from(opts.buffers) > MAX_REG_BUFFERS {
        return Err(Error::Usage(format!(
            "--buffers {}: io_uring registers at most {MAX_REG_BUFFERS} buffers at once",
            opts.buffers
        )));
    }
    let per_buffer = u64::from(opts.pages).saturating_mul(page);
    if per_buffer > MAX_BUFFER_BYTES {
        return Err(Error::Usage(format!(
            "--pages {}: a buffer of {} is over io_uring's limit of {} per buffer",
            opts.pages,
            unit(per_buffer),
            unit(MAX_BUFFER_BYTES)
        )));
    }
    let total = per_buffer.saturating_mul(u64::from(opts.buffers));
    if let Some(avail) = available
        && total > avail
    {
        return Err(Error::Usage(format!(
            "--buffers {} --pages {}: {} of buffers, more than this machine's available memory ({}, MemAvailable)",
            opts.buffers,
            opts.pages,
            unit(total),
            unit(avail)
        )));
    }
    Ok(())
}

/// The 99th percentile (nearest rank) of `v`, 0 when empty.
fn p99(v: &mut [u64]) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let rank = (v.len() * 99).div_ceil(100).max(1);
    v[rank - 1]
}

fn odirect(opts: &PinChurnOpts, buf: &mut Aligned, s: &mut PinChurnSummary) -> Result<()> {
    let dir = opts.dir.clone().unwrap_or_else(|| PathBuf::from("/var/tmp"));
    // The default directory may lack O_DIRECT (tmpfs): noted, and skipped.
    // A directory the user named must work: its failure is an error.
    let named = |s: &mut PinChurnSummary, what: String| -> Result<()> {
        if opts.dir.is_some() {
            Err(Error::Workload(format!("--dir {}: {what}", dir.display())))
        } else {
            s.odirect_note = Some(what);
            Ok(())
        }
    };
    let path = dir.join(format!("gdrtrace-pin-churn-{}.dat", std::process::id()));
    let file = match OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) => return named(s, format!("O_DIRECT unavailable in {}: {e}", dir.display())),
    };
    let chunk = buf.len;
    let total = opts.odirect_mib as u64 * 1024 * 1024;
    let mut off = 0u64;
    let result = (|| -> io::Result<()> {
        while off < total {
            file.write_all_at(buf.slice_mut(), off)?;
            s.odirect_ios += 1;
            off += chunk as u64;
        }
        let mut roff = 0u64;
        while roff < total {
            file.read_exact_at(buf.slice_mut(), roff)?;
            s.odirect_ios += 1;
            roff += chunk as u64;
        }
        Ok(())
    })();
    let _ = std::fs::remove_file(&path);
    match result {
        Ok(()) => {
            s.odirect_bytes = 2 * total;
            s.odirect_pages = s.odirect_bytes / s.page_size;
        }
        Err(e) => return named(s, format!("O_DIRECT I/O failed in {}: {e}", dir.display())),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(buffers: u32, pages: u32) -> PinChurnOpts {
        PinChurnOpts {
            iterations: 1,
            buffers,
            pages,
            odirect_mib: 0,
            dir: None,
            summary: None,
        }
    }

    #[test]
    fn requests_past_the_kernel_or_the_memory_are_refused() {
        let gib = 1u64 << 30;
        assert!(check_memory(&opts(4, 16), 4096, Some(gib)).is_ok());
        let e = check_memory(&opts(u32::MAX, 16), 4096, Some(gib)).expect_err("too many buffers");
        assert!(e.to_string().contains("at most 16384 buffers"), "{e}");
        let e = check_memory(&opts(1, u32::MAX), 4096, Some(u64::MAX)).expect_err("buffer too large");
        assert!(e.to_string().contains("per buffer"), "{e}");
        let e = check_memory(&opts(16384, 16384), 4096, Some(gib)).expect_err("over MemAvailable");
        assert!(e.to_string().contains("MemAvailable"), "{e}");
        assert_eq!(e.exit_code(), 2);
        assert!(
            check_memory(&opts(16384, 16384), 4096, None).is_ok(),
            "unknown memory: the kernel decides"
        );
    }
}
