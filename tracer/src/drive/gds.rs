//! `gdrtrace drive gds`: a GPUDirect Storage workload through libcufile.
//! It fills a GPU buffer with a pattern, writes it to a file with
//! `cuFileWrite` `--iterations` times, clears the buffer, reads it back
//! with `cuFileRead` as many times and checks the bytes; with `--seconds`
//! it then reads `--block`-sized pieces of the file in a loop (the job
//! `attach` joins mid-run, and the overhead benchmark's); with
//! `--start-after` it waits between its set-up and its I/O (a job `attach`
//! joins before its first byte).
//!
//! libcufile and libcuda are opened with `dlopen` and called through
//! function pointers. Why not `cudarc::cufile`'s loader: it looks for
//! `libcufile.so` and `libcufile.so.{13,12,...,1}`, never `libcufile.so.0`,
//! the name the CUDA toolkit and torch's wheel install; without the -dev
//! symlink it panics. The descriptor type comes from `cudarc::cufile::sys`;
//! `CUfileError_t` crosses the boundary as two `int`s (an unknown error
//! code from a newer libcufile cannot be undefined behaviour). A libcuda
//! without `cuInit` is a stand-in (tests/standin/standin_cuda.c): no
//! context is made there.
use std::{
    ffi::{CString, c_int, c_void},
    os::unix::{fs::OpenOptionsExt as _, io::AsRawFd as _},
    path::PathBuf,
    time::{Duration, Instant},
};

use cudarc::cufile::sys::{CUfileDescr_t, CUfileDescr_t__bindgen_ty_1, CUfileFileHandleType};
use serde::Serialize;

use crate::units::parse_size;

/// libcufile's names, tried in order: the soname the CUDA toolkit and the
/// Python wheels ship, the -dev symlink, then the toolkit's directory.
pub const LIBCUFILE_NAMES: [&str; 4] = [
    "libcufile.so.0",
    "libcufile.so",
    "/usr/local/cuda/targets/x86_64-linux/lib/libcufile.so.0",
    "/usr/local/cuda/lib64/libcufile.so.0",
];

#[derive(Clone, Debug, clap::Args)]
pub struct GdsOpts {
    /// The file to write and read (created where missing; on the
    /// filesystem whose GDS path is wanted).
    #[arg(long)]
    pub file: PathBuf,
    /// Bytes of the GPU buffer, written and read whole (K, M, G: powers of 1024).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "64M")]
    pub size: u64,
    /// Writes of the buffer, then as many reads.
    #[arg(long, default_value_t = 8)]
    pub iterations: u64,
    /// Then read --block pieces of the file in a loop for this long
    /// (seconds; 0: no loop).
    #[arg(long, default_value_t = 0.0)]
    pub seconds: f64,
    /// Bytes per read of the --seconds loop.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "4K")]
    pub block: u64,
    /// Open the file without O_DIRECT (cuFile then uses POSIX I/O).
    #[arg(long)]
    pub no_odirect: bool,
    /// Register the GPU buffer with cuFile (cuFileBufRegister).
    #[arg(long)]
    pub register: bool,
    /// The libcufile to open (default: libcufile.so.0, then the CUDA toolkit's).
    #[arg(long)]
    pub cufile: Option<String>,
    /// The libcuda to open (a stand-in, without cuInit, makes no context).
    #[arg(long, default_value = "libcuda.so.1")]
    pub cuda: String,
    /// Milliseconds to wait after opening libcufile (a tracer attaches a
    /// library opened after the process started at its next rescan, within
    /// 250 ms), and between the phases (a trace tells phases apart by its
    /// ticks of 50-250 ms).
    #[arg(long, default_value_t = 600)]
    pub settle_ms: u64,
    /// Once cuFile's set-up is done (driver open, handle and buffer
    /// registered), say `gds: ready` on stderr and wait this long before
    /// the I/O (e.g. 3s): a tracer attached after that line sees every
    /// byte moved and none of the set-up.
    #[arg(long, value_name = "DURATION", value_parser = crate::units::parse_duration)]
    pub start_after: Option<Duration>,
    /// Also write the summary as JSON to this file.
    #[arg(long)]
    pub summary: Option<PathBuf>,
}

#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct GdsSummary {
    pub pid: u32,
    /// The libcufile opened (what dlopen was given).
    pub lib: String,
    pub file: String,
    pub size: u64,
    pub iterations: u64,
    pub odirect: bool,
    pub registered: bool,
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub write_s: f64,
    pub read_s: f64,
    /// Reads of the --seconds loop, their bytes and seconds.
    pub loop_reads: u64,
    pub loop_bytes: u64,
    pub loop_s: f64,
    /// The buffer came back as written.
    pub verified: bool,
}

impl GdsSummary {
    pub fn line(&self) -> String {
        let gbs = |b: u64, s: f64| if s > 0.0 { b as f64 / s / 1e9 } else { 0.0 };
        format!(
            "gds: pid={} lib={} file={} size={} iterations={} odirect={} registered={} bytes_written={} bytes_read={} write_gb_s={:.3} read_gb_s={:.3} loop_reads={} loop_bytes={} loop_ns_per_read={:.0} verified={}",
            self.pid,
            self.lib,
            self.file,
            self.size,
            self.iterations,
            self.odirect,
            self.registered,
            self.bytes_written,
            self.bytes_read,
            gbs(self.bytes_written, self.write_s),
            gbs(self.bytes_read, self.read_s),
            self.loop_reads,
            self.loop_bytes,
            self.loop_s * 1e9 / self.loop_reads.max(1) as f64,
            self.verified
        )
    }
}

/// `CUfileError_t`: `{CUfileOpError err; CUresult cu_err}`, as two ints.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct CufileError {
    err: c_int,
    cu_err: c_int,
}

// CUfileError_t cuFileDriverOpen(void);  cuFileDriverClose(void);
type DriverFn = unsafe extern "C" fn() -> CufileError;
// CUfileError_t cuFileHandleRegister(CUfileHandle_t *fh, CUfileDescr_t *descr);
type HandleRegisterFn = unsafe extern "C" fn(*mut *mut c_void, *mut CUfileDescr_t) -> CufileError;
// void cuFileHandleDeregister(CUfileHandle_t fh);
type HandleDeregisterFn = unsafe extern "C" fn(*mut c_void);
// CUfileError_t cuFileBufRegister(const void *bufPtr_base, size_t length, int flags);
type BufRegisterFn = unsafe extern "C" fn(*const c_void, usize, c_int) -> CufileError;
// CUfileError_t cuFileBufDeregister(const void *bufPtr_base);
type BufDeregisterFn = unsafe extern "C" fn(*const c_void) -> CufileError;
// ssize_t cuFileRead(CUfileHandle_t fh, void *bufPtr_base, size_t size, off_t file_offset, off_t bufPtr_offset);
// ssize_t cuFileWrite(CUfileHandle_t fh, const void *bufPtr_base, size_t size, off_t file_offset, off_t bufPtr_offset);
type IoFn = unsafe extern "C" fn(*mut c_void, *mut c_void, usize, i64, i64) -> isize;

// CUresult cuInit(unsigned int flags);
type InitFn = unsafe extern "C" fn(u32) -> c_int;
// CUresult cuDeviceGet(CUdevice *device, int ordinal);
type DeviceGetFn = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
// CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
type CtxRetainFn = unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int;
// CUresult cuCtxSetCurrent(CUcontext ctx);
type CtxSetFn = unsafe extern "C" fn(*mut c_void) -> c_int;
// CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
type AllocFn = unsafe extern "C" fn(*mut u64, usize) -> c_int;
// CUresult cuMemFree_v2(CUdeviceptr dptr);
type FreeFn = unsafe extern "C" fn(u64) -> c_int;
// CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n);
type HtoDFn = unsafe extern "C" fn(u64, *const c_void, usize) -> c_int;
// CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s);
type DtoHFn = unsafe extern "C" fn(*mut c_void, u64, usize, *mut c_void) -> c_int;
// CUresult cuCtxSynchronize(void);
type SyncFn = unsafe extern "C" fn() -> c_int;

/// A library opened with `dlopen` (never closed: its functions stay callable).
struct Lib {
    name: String,
    handle: *mut c_void,
}

impl Lib {
    fn open(name: &str) -> Result<Lib, String> {
        let c = CString::new(name).map_err(|_| format!("gds: bad library name {name:?}"))?;
        // SAFETY: a NUL-terminated name.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if handle.is_null() {
            return Err(format!(
                "gds: cannot open {name}: {}",
                crate::drive::cuda_copy::cu::dlerror_text()
            ));
        }
        Ok(Lib {
            name: name.to_string(),
            handle,
        })
    }

    fn sym(&self, s: &str) -> Option<*mut c_void> {
        let c = CString::new(s).expect("symbol names have no NUL");
        // SAFETY: a live handle and a NUL-terminated name.
        let p = unsafe { libc::dlsym(self.handle, c.as_ptr()) };
        (!p.is_null()).then_some(p)
    }

    fn need(&self, s: &str) -> Result<*mut c_void, String> {
        self.sym(s).ok_or_else(|| format!("gds: {} has no {s}", self.name))
    }
}

/// Opens libcufile: `--cufile`, else the names tried in order.
fn open_cufile(o: &GdsOpts) -> Result<Lib, String> {
    if let Some(name) = &o.cufile {
        return Lib::open(name);
    }
    let mut errors = Vec::new();
    for name in LIBCUFILE_NAMES {
        match Lib::open(name) {
            Ok(l) => return Ok(l),
            Err(e) => errors.push(e),
        }
    }
    Err(format!(
        "gds: no libcufile ({}); install the CUDA toolkit's GDS libraries, or name one with --cufile",
        errors.join("; ")
    ))
}

fn check(call: &str, e: CufileError) -> Result<(), String> {
    if e.err == 0 {
        Ok(())
    } else {
        Err(format!(
            "gds: {call} failed: CUfileOpError {} (CUresult {})",
            e.err, e.cu_err
        ))
    }
}

fn cu(call: &str, rc: c_int) -> Result<(), String> {
    if rc == 0 {
        Ok(())
    } else {
        Err(format!("gds: {call} failed: CUresult {rc}"))
    }
}

/// Runs the workload; one line of error on the first failure.
pub fn run(o: &GdsOpts) -> Result<GdsSummary, String> {
    if o.size == 0 || o.block == 0 {
        return Err("gds: --size and --block must be more than 0".into());
    }
    let size = usize::try_from(o.size).map_err(|_| "gds: --size too large".to_string())?;
    let cuda = Lib::open(&o.cuda)?;
    // A tracer attaches a library opened now at its next rescan: the
    // allocation below must be seen, or the buffer's memory is unknown.
    std::thread::sleep(Duration::from_millis(o.settle_ms));
    // SAFETY: each symbol has the prototype pasted above its type.
    let (alloc, free, htod, dtoh) = unsafe {
        (
            std::mem::transmute::<*mut c_void, AllocFn>(cuda.need("cuMemAlloc_v2")?),
            std::mem::transmute::<*mut c_void, FreeFn>(cuda.need("cuMemFree_v2")?),
            std::mem::transmute::<*mut c_void, HtoDFn>(cuda.need("cuMemcpyHtoD_v2")?),
            std::mem::transmute::<*mut c_void, DtoHFn>(cuda.need("cuMemcpyDtoHAsync_v2")?),
        )
    };
    let sync = cuda.sym("cuCtxSynchronize");
    // A real driver: a context on device 0. A stand-in has no cuInit.
    if let Some(init) = cuda.sym("cuInit") {
        // SAFETY: as above.
        let (init, get, retain, set) = unsafe {
            (
                std::mem::transmute::<*mut c_void, InitFn>(init),
                std::mem::transmute::<*mut c_void, DeviceGetFn>(cuda.need("cuDeviceGet")?),
                std::mem::transmute::<*mut c_void, CtxRetainFn>(cuda.need("cuDevicePrimaryCtxRetain")?),
                std::mem::transmute::<*mut c_void, CtxSetFn>(cuda.need("cuCtxSetCurrent")?),
            )
        };
        let (mut dev, mut ctx) = (0, std::ptr::null_mut());
        // SAFETY: valid out-pointers.
        unsafe {
            cu("cuInit", init(0))?;
            cu("cuDeviceGet", get(&mut dev, 0))?;
            cu("cuDevicePrimaryCtxRetain", retain(&mut ctx, dev))?;
            cu("cuCtxSetCurrent", set(ctx))?;
        }
    }
    let synchronize = || -> Result<(), String> {
        if let Some(s) = sync {
            // SAFETY: as above.
            let s = unsafe { std::mem::transmute::<*mut c_void, SyncFn>(s) };
            // SAFETY: no arguments.
            cu("cuCtxSynchronize", unsafe { s() })?;
        }
        Ok(())
    };
    let mut dptr = 0u64;
    // SAFETY: a valid out-pointer.
    cu("cuMemAlloc_v2", unsafe { alloc(&mut dptr, size) })?;
    let pattern: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    // SAFETY: `dptr` holds `size` bytes, as does `pattern`.
    cu("cuMemcpyHtoD_v2", unsafe { htod(dptr, pattern.as_ptr().cast(), size) })?;

    let lib = open_cufile(o)?;
    // SAFETY: each symbol has the prototype pasted above its type.
    let f = unsafe {
        (
            std::mem::transmute::<*mut c_void, DriverFn>(lib.need("cuFileDriverOpen")?),
            std::mem::transmute::<*mut c_void, DriverFn>(lib.need("cuFileDriverClose")?),
            std::mem::transmute::<*mut c_void, HandleRegisterFn>(lib.need("cuFileHandleRegister")?),
            std::mem::transmute::<*mut c_void, HandleDeregisterFn>(lib.need("cuFileHandleDeregister")?),
            std::mem::transmute::<*mut c_void, BufRegisterFn>(lib.need("cuFileBufRegister")?),
            std::mem::transmute::<*mut c_void, BufDeregisterFn>(lib.need("cuFileBufDeregister")?),
            std::mem::transmute::<*mut c_void, IoFn>(lib.need("cuFileRead")?),
            std::mem::transmute::<*mut c_void, IoFn>(lib.need("cuFileWrite")?),
        )
    };
    let (driver_open, driver_close, handle_register, handle_deregister, buf_register, buf_deregister, read, write) = f;
    let settle = || std::thread::sleep(Duration::from_millis(o.settle_ms));
    settle();
    // SAFETY: no arguments.
    check("cuFileDriverOpen", unsafe { driver_open() })?;
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true).write(true).create(true).truncate(false).mode(0o644);
    if !o.no_odirect {
        opts.custom_flags(libc::O_DIRECT);
    }
    let file = opts
        .open(&o.file)
        .map_err(|e| format!("gds: cannot open {}: {e}", o.file.display()))?;
    let mut descr = CUfileDescr_t {
        type_: CUfileFileHandleType::CU_FILE_HANDLE_TYPE_OPAQUE_FD,
        handle: CUfileDescr_t__bindgen_ty_1 { fd: file.as_raw_fd() },
        fs_ops: std::ptr::null(),
    };
    let mut fh: *mut c_void = std::ptr::null_mut();
    // SAFETY: a valid out-pointer and descriptor; the fd stays open until
    // the handle is deregistered.
    check("cuFileHandleRegister", unsafe { handle_register(&mut fh, &mut descr) })?;
    let buf = dptr as *mut c_void;
    if o.register {
        // SAFETY: the buffer is `size` bytes of device memory.
        check("cuFileBufRegister", unsafe { buf_register(buf, size, 0) })?;
    }
    if let Some(wait) = o.start_after {
        eprintln!("gds: ready (pid {}), the I/O in {wait:?}", std::process::id());
        std::thread::sleep(wait);
    }
    // The buffer's bytes at `at` go to (come from) the file's at `at`.
    let io = |f: IoFn, what: &str, len: usize, at: i64| -> Result<u64, String> {
        // SAFETY: `fh` is registered and `buf` holds `at + len` bytes.
        let n = unsafe { f(fh, buf, len, at, at) };
        if n < 0 || n as usize != len {
            return Err(format!("gds: {what} of {len} bytes at {at} returned {n}"));
        }
        Ok(n as u64)
    };
    let mut s = GdsSummary {
        pid: std::process::id(),
        lib: lib.name.clone(),
        file: o.file.display().to_string(),
        size: o.size,
        iterations: o.iterations,
        odirect: !o.no_odirect,
        registered: o.register,
        ..GdsSummary::default()
    };
    let t = Instant::now();
    for _ in 0..o.iterations {
        s.bytes_written += io(write, "cuFileWrite", size, 0)?;
    }
    s.write_s = t.elapsed().as_secs_f64();
    settle();
    let zeros = vec![0u8; size];
    // SAFETY: as above.
    cu("cuMemcpyHtoD_v2", unsafe { htod(dptr, zeros.as_ptr().cast(), size) })?;
    synchronize()?;
    settle();
    let t = Instant::now();
    for _ in 0..o.iterations {
        s.bytes_read += io(read, "cuFileRead", size, 0)?;
    }
    s.read_s = t.elapsed().as_secs_f64();
    if o.seconds > 0.0 {
        let block = usize::try_from(o.block.min(o.size)).unwrap_or(size);
        let pieces = (size / block).max(1) as i64;
        let t = Instant::now();
        while t.elapsed().as_secs_f64() < o.seconds {
            let at = (s.loop_reads as i64 % pieces) * block as i64;
            s.loop_bytes += io(read, "cuFileRead", block, at)?;
            s.loop_reads += 1;
        }
        s.loop_s = t.elapsed().as_secs_f64();
    }
    settle();
    let mut back = vec![0u8; size];
    // SAFETY: `back` holds `size` bytes; no stream (synchronous for pageable memory).
    cu("cuMemcpyDtoHAsync_v2", unsafe {
        dtoh(back.as_mut_ptr().cast(), dptr, size, std::ptr::null_mut())
    })?;
    synchronize()?;
    s.verified = back == pattern;
    if o.register {
        // SAFETY: registered above.
        check("cuFileBufDeregister", unsafe { buf_deregister(buf) })?;
    }
    // SAFETY: registered above; the fd is still open.
    unsafe { handle_deregister(fh) };
    drop(file);
    // SAFETY: no arguments.
    check("cuFileDriverClose", unsafe { driver_close() })?;
    // SAFETY: allocated above.
    cu("cuMemFree_v2", unsafe { free(dptr) })?;
    Ok(s)
}
