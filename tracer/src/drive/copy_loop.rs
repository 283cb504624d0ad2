//! `gdrtrace drive copy-loop`: a loop of small asynchronous copies, the
//! copy-heavy job of `gdrtrace bench copies`. It opens a libcuda (by
//! default the stand-in the tests build; any `libcuda.so.1` with the
//! entry points below), takes one "device" buffer from `cuMemAlloc_v2`
//! and copies a pageable host buffer to it and back, `--copies` times
//! each way, timing only the loop.
//!
//! With the stand-in no driver state exists, so no `cuInit` or context is
//! needed: the calls return as soon as the bytes are moved.
use std::{
    ffi::{CString, c_int, c_void},
    time::Instant,
};

use serde::Serialize;

#[derive(Clone, Debug, clap::Args)]
pub struct CopyLoopOpts {
    /// The libcuda to open (a stand-in: no cuInit or context is made).
    #[arg(long, default_value = "libcuda.so.1")]
    pub lib: String,
    /// Copies each way (cuMemcpyHtoDAsync_v2, then cuMemcpyDtoHAsync_v2).
    #[arg(long, default_value_t = 300_000)]
    pub copies: u64,
    /// Bytes per copy.
    #[arg(long, default_value_t = 8)]
    pub bytes: u64,
    /// Copy for this long instead (seconds; 0: --copies each way).
    #[arg(long, default_value_t = 0.0)]
    pub seconds: f64,
    /// Milliseconds to wait between opening the library and the loop (a
    /// tracer finds a library dlopened after start at its next rescan,
    /// within 250 ms).
    #[arg(long, default_value_t = 0)]
    pub wait_ms: u64,
    /// Pause for --pause-ms after every this many pairs (0: never): the
    /// shape of a torch loop of asynchronous copies that synchronizes
    /// every few (a burst of calls, then a wait on the GPU).
    #[arg(long, default_value_t = 0)]
    pub burst: u64,
    /// Milliseconds of each pause (--burst).
    #[arg(long, default_value_t = 0.0)]
    pub pause_ms: f64,
    /// Milliseconds to wait after the loop before exiting (a job's
    /// teardown: the copies ended, the process lives on).
    #[arg(long, default_value_t = 0)]
    pub linger_ms: u64,
    /// Also write the summary as JSON to this file.
    #[arg(long)]
    pub summary: Option<std::path::PathBuf>,
}

#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct CopyLoopSummary {
    pub pid: u32,
    /// Copies made (both ways) and failed.
    pub copies: u64,
    pub failed: u64,
    pub bytes: u64,
    /// Seconds of the loop alone.
    pub loop_s: f64,
}

impl CopyLoopSummary {
    pub fn line(&self) -> String {
        format!(
            "copy-loop: pid={} copies={} failed={} bytes={} loop {:.6} s ({:.0} ns a copy)",
            self.pid,
            self.copies,
            self.failed,
            self.bytes,
            self.loop_s,
            self.loop_s * 1e9 / self.copies.max(1) as f64
        )
    }
}

// CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
type Alloc = unsafe extern "C" fn(*mut u64, usize) -> c_int;
// CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s);
type HtoD = unsafe extern "C" fn(u64, *const c_void, usize, *mut c_void) -> c_int;
// CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s);
type DtoH = unsafe extern "C" fn(*mut c_void, u64, usize, *mut c_void) -> c_int;

fn dl_error() -> String {
    // SAFETY: dlerror returns a thread-local C string or null.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: non-null, NUL-terminated.
        unsafe { std::ffi::CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// Runs the loop; one line of error when the library or a symbol is missing.
pub fn run(o: &CopyLoopOpts) -> Result<CopyLoopSummary, String> {
    let name = CString::new(o.lib.as_str()).map_err(|_| format!("copy-loop: bad library name {:?}", o.lib))?;
    // SAFETY: a NUL-terminated name; the handle is never closed (the
    // functions stay callable for the process's life).
    let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return Err(format!("copy-loop: cannot open {}: {}", o.lib, dl_error()));
    }
    let sym = |s: &str| {
        let c = CString::new(s).expect("symbol names have no NUL");
        // SAFETY: `h` is a live handle; `c` is NUL-terminated.
        let p = unsafe { libc::dlsym(h, c.as_ptr()) };
        if p.is_null() {
            Err(format!("copy-loop: {} has no {s}", o.lib))
        } else {
            Ok(p)
        }
    };
    // SAFETY: the symbols have the prototypes pasted above the types.
    let (alloc, htod, dtoh) = unsafe {
        (
            std::mem::transmute::<*mut c_void, Alloc>(sym("cuMemAlloc_v2")?),
            std::mem::transmute::<*mut c_void, HtoD>(sym("cuMemcpyHtoDAsync_v2")?),
            std::mem::transmute::<*mut c_void, DtoH>(sym("cuMemcpyDtoHAsync_v2")?),
        )
    };
    let n = crate::clamp::at_least("--bytes", o.bytes, 1, |n| n.to_string(), "the smallest copy") as usize;
    let mut dev = 0u64;
    // SAFETY: `dev` is a valid out-pointer.
    let rc = unsafe { alloc(&mut dev, n) };
    if rc != 0 {
        return Err(format!("copy-loop: cuMemAlloc_v2 failed: CUresult {rc}"));
    }
    let mut host = vec![7u8; n];
    std::thread::sleep(std::time::Duration::from_millis(o.wait_ms));
    let mut failed = 0u64;
    let mut made = 0u64;
    let t = Instant::now();
    while if o.seconds > 0.0 {
        t.elapsed().as_secs_f64() < o.seconds
    } else {
        made < o.copies
    } {
        // SAFETY: `dev` holds `n` bytes, so does `host`; no stream.
        unsafe {
            failed += (htod(dev, host.as_ptr().cast(), n, std::ptr::null_mut()) != 0) as u64;
            failed += (dtoh(host.as_mut_ptr().cast(), dev, n, std::ptr::null_mut()) != 0) as u64;
        }
        made += 1;
        if o.burst > 0 && made.is_multiple_of(o.burst) && o.pause_ms > 0.0 {
            std::thread::sleep(std::time::Duration::from_secs_f64(o.pause_ms / 1e3));
        }
    }
    let loop_s = t.elapsed().as_secs_f64();
    std::hint::black_box(&host);
    std::thread::sleep(std::time::Duration::from_millis(o.linger_ms));
    Ok(CopyLoopSummary {
        pid: std::process::id(),
        copies: 2 * made,
        failed,
        bytes: 2 * made * n as u64,
        loop_s,
    })
}
