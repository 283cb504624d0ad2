//! The few CUDA driver API pieces the GPU workloads share, over
//! `cudarc::driver::sys` (libcuda is loaded at run time).
//!
//! cudarc's dynamic loader panics when libcuda cannot be loaded or lacks a
//! symbol, so [`init`] probes `libcuda.so.1` with `dlopen`/`dlsym` first and
//! returns a clean error instead. Every raw call's C prototype is pasted
//! above its first use; every `CUresult` is checked and names its call.
use std::{
    ffi::{CStr, c_char, c_int, c_uint, c_void},
    sync::OnceLock,
};

use cudarc::driver::sys::{self, CUcontext, CUdevice, CUdeviceptr, CUresult, CUstream};

/// Driver library the probe opens (the name the driver package installs).
pub const LIBCUDA: &str = "libcuda.so.1";

/// Every libcuda entry point the GPU workloads call: the probe checks that
/// each one resolves, so cudarc's loader never panics on a missing symbol.
const REQUIRED_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceCanAccessPeer",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuCtxEnablePeerAccess",
    "cuCtxDisablePeerAccess",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemsetD8_v2",
    "cuMemsetD32Async",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2",
    "cuMemcpyDtoD_v2",
    "cuMemcpyPeer",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
];

/// A CUDA driver failure, one line.
#[derive(Clone, Debug, thiserror::Error)]
pub enum CuError {
    #[error("no CUDA driver: {LIBCUDA} could not be loaded ({0})")]
    NoDriver(String),
    #[error("CUDA driver {LIBCUDA} lacks {0} (driver too old?)")]
    MissingSymbol(&'static str),
    #[error("no CUDA device: cuDeviceGetCount found none")]
    NoDevice,
    #[error("{call} failed: {name} ({desc})")]
    Call {
        call: &'static str,
        code: u32,
        name: String,
        desc: String,
    },
}

impl CuError {
    fn call(call: &'static str, r: CUresult) -> Self {
        let (name, desc) = error_text(r);
        CuError::Call {
            call,
            code: r as u32,
            name,
            desc,
        }
    }

    /// The driver's error code, for a failed call.
    pub fn code(&self) -> Option<u32> {
        match self {
            CuError::Call { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// `Ok` for `CUDA_SUCCESS`, else the error naming `call`.
pub fn check(call: &'static str, r: CUresult) -> Result<(), CuError> {
    if r == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CuError::call(call, r))
    }
}

/// `CUDA_ERROR_NAME` and its description, from the driver.
fn error_text(r: CUresult) -> (String, String) {
    let fetch = |f: unsafe fn(CUresult, *mut *const c_char) -> CUresult| -> Option<String> {
        let mut p: *const c_char = std::ptr::null();
        // CUresult cuGetErrorName(CUresult error, const char **pStr);
        // CUresult cuGetErrorString(CUresult error, const char **pStr);
        // SAFETY: out-pointer to a local; the driver stores a pointer to a
        // static NUL-terminated string (or leaves it NULL for unknown codes).
        let rc = unsafe { f(r, &mut p) };
        if rc != CUresult::CUDA_SUCCESS || p.is_null() {
            return None;
        }
        // SAFETY: non-null, NUL-terminated, static per the driver API.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    let name = fetch(sys::cuGetErrorName).unwrap_or_else(|| format!("{r:?}"));
    let desc = fetch(sys::cuGetErrorString).unwrap_or_else(|| format!("CUresult {}", r as u32));
    (name, desc)
}

/// The text of the last `dlerror()`, or a placeholder.
pub fn dlerror_text() -> String {
    // SAFETY: dlerror returns NULL or a thread-local NUL-terminated string.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: non-null and NUL-terminated (see above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// Probes libcuda (so that cudarc's loader cannot panic), then `cuInit(0)`.
/// Idempotent; the first outcome is kept.
pub fn init() -> Result<(), CuError> {
    static INIT: OnceLock<Result<(), CuError>> = OnceLock::new();
    INIT.get_or_init(|| {
        probe_libcuda()?;
        // CUresult cuInit(unsigned int Flags);
        // SAFETY: libcuda is loadable and has the symbol (probed above).
        check("cuInit", unsafe { sys::cuInit(0) })
    })
    .clone()
}

fn probe_libcuda() -> Result<(), CuError> {
    let name = c"libcuda.so.1";
    // SAFETY: a constant NUL-terminated name. The handle is deliberately
    // never closed: cudarc keeps the library loaded for the process anyway.
    let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return Err(CuError::NoDriver(dlerror_text()));
    }
    for &sym in REQUIRED_SYMBOLS {
        let c = std::ffi::CString::new(sym).map_err(|_| CuError::MissingSymbol(sym))?;
        // SAFETY: `h` is a live handle from dlopen; `c` is NUL-terminated.
        if unsafe { libc::dlsym(h, c.as_ptr()) }.is_null() {
            return Err(CuError::MissingSymbol(sym));
        }
    }
    // cudarc opens its own handle from a list of names (libcuda.so first,
    // libcuda.so.1 among them) and panics when none loads: check it too.
    // SAFETY: only tries to load the library; no symbol is called.
    if !unsafe { sys::is_culib_present() } {
        return Err(CuError::NoDriver("cudarc's loader found no libcuda".into()));
    }
    Ok(())
}

/// Driver version as the driver encodes it (1000*major + 10*minor).
pub fn driver_version() -> Result<i32, CuError> {
    let mut v: c_int = 0;
    // CUresult cuDriverGetVersion(int *driverVersion);
    // SAFETY: out-pointer to a local; init() succeeded before any caller.
    check("cuDriverGetVersion", unsafe { sys::cuDriverGetVersion(&mut v) })?;
    Ok(v)
}

/// Number of visible CUDA devices.
pub fn device_count() -> Result<usize, CuError> {
    let mut n: c_int = 0;
    // CUresult cuDeviceGetCount(int *count);
    // SAFETY: out-pointer to a local.
    check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut n) })?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// Whether `dev` can map `peer`'s memory (`cuDeviceCanAccessPeer`).
pub fn can_access_peer(dev: &Device, peer: &Device) -> Result<bool, CuError> {
    let mut yes: c_int = 0;
    // CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev);
    // SAFETY: out-pointer to a local; both handles come from cuDeviceGet.
    check("cuDeviceCanAccessPeer", unsafe {
        sys::cuDeviceCanAccessPeer(&mut yes, dev.dev, peer.dev)
    })?;
    Ok(yes != 0)
}

/// Process CPU time (user + system, all threads) in seconds, from getrusage.
pub fn cpu_time_s() -> f64 {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: out-pointer to a local.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// One device with its primary context retained (released on drop).
#[derive(Debug)]
pub struct Device {
    pub ordinal: usize,
    pub dev: CUdevice,
    pub ctx: CUcontext,
    pub name: String,
}

impl Device {
    /// `cuDeviceGet`, `cuDeviceGetName`, `cuDevicePrimaryCtxRetain`; the
    /// context is made current.
    pub fn open(ordinal: usize) -> Result<Self, CuError> {
        let ord = c_int::try_from(ordinal).unwrap_or(c_int::MAX);
        let mut dev: CUdevice = 0;
        // CUresult cuDeviceGet(CUdevice *device, int ordinal);
        // SAFETY: out-pointer to a local.
        check("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut dev, ord) })?;
        let mut buf = [0 as c_char; 256];
        // CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
        // SAFETY: the buffer holds `len` bytes; the driver NUL-terminates.
        check("cuDeviceGetName", unsafe {
            sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, dev)
        })?;
        buf[buf.len() - 1] = 0;
        // SAFETY: NUL-terminated within the buffer (last byte forced to 0).
        let name = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned();
        let mut ctx: CUcontext = std::ptr::null_mut();
        // CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
        // SAFETY: out-pointer to a local; `dev` from cuDeviceGet.
        check("cuDevicePrimaryCtxRetain", unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut ctx, dev)
        })?;
        let d = Device {
            ordinal,
            dev,
            ctx,
            name,
        };
        d.make_current()?;
        Ok(d)
    }

    /// Binds this device's primary context to the calling thread.
    pub fn make_current(&self) -> Result<(), CuError> {
        // CUresult cuCtxSetCurrent(CUcontext ctx);
        // SAFETY: `ctx` is retained until drop.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(self.ctx) })
    }

    /// Makes the context current and waits for all its work.
    pub fn synchronize(&self) -> Result<(), CuError> {
        self.make_current()?;
        // CUresult cuCtxSynchronize(void);
        // SAFETY: a current context is bound (above).
        check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
    }

    /// Lets this device's context access `peer`'s memory
    /// (`cuCtxEnablePeerAccess`); already enabled counts as success.
    pub fn enable_peer_access(&self, peer: &Device) -> Result<(), CuError> {
        self.make_current()?;
        // CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags);
        // SAFETY: both contexts are retained; Flags must be 0.
        let r = unsafe { sys::cuCtxEnablePeerAccess(peer.ctx, 0) };
        if r == CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
            return Ok(());
        }
        check("cuCtxEnablePeerAccess", r)
    }

    /// Undoes [`Device::enable_peer_access`] (`cuCtxDisablePeerAccess`).
    pub fn disable_peer_access(&self, peer: &Device) -> Result<(), CuError> {
        self.make_current()?;
        // CUresult cuCtxDisablePeerAccess(CUcontext peerContext);
        // SAFETY: both contexts are retained.
        let r = unsafe { sys::cuCtxDisablePeerAccess(peer.ctx) };
        if r == CUresult::CUDA_ERROR_PEER_ACCESS_NOT_ENABLED {
            return Ok(());
        }
        check("cuCtxDisablePeerAccess", r)
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // CUresult cuDevicePrimaryCtxRelease(CUdevice dev);  (exported as _v2)
        // SAFETY: balances the retain in open(); errors are moot at drop.
        let _ = unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.dev) };
    }
}

/// Device memory from `cuMemAlloc` (freed on drop; drop it before its
/// [`Device`]).
#[derive(Debug)]
pub struct DeviceBuf {
    pub ptr: CUdeviceptr,
    pub len: usize,
    ctx: CUcontext,
}

impl DeviceBuf {
    /// Allocates `len` bytes on `dev` and fills them with `byte`
    /// (`cuMemsetD8`, not a copy).
    pub fn new(dev: &Device, len: usize, byte: u8) -> Result<Self, CuError> {
        dev.make_current()?;
        let mut ptr: CUdeviceptr = 0;
        // CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytesize);  (exported as _v2)
        // SAFETY: out-pointer to a local; a context is current.
        check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut ptr, len.max(1)) })?;
        let b = DeviceBuf { ptr, len, ctx: dev.ctx };
        // CUresult cuMemsetD8(CUdeviceptr dstDevice, unsigned char uc, size_t N);  (exported as _v2)
        // SAFETY: `len` bytes were just allocated at `ptr`.
        check("cuMemsetD8", unsafe { sys::cuMemsetD8_v2(ptr, byte, len) })?;
        Ok(b)
    }
}

impl Drop for DeviceBuf {
    fn drop(&mut self) {
        // CUresult cuMemFree(CUdeviceptr dptr);  (exported as _v2)
        // SAFETY: `ptr` came from cuMemAlloc in `ctx`, which is still
        // retained (buffers drop before their Device); errors are moot here.
        unsafe {
            let _ = sys::cuCtxSetCurrent(self.ctx);
            let _ = sys::cuMemFree_v2(self.ptr);
        }
    }
}

/// Page-locked host memory from `cuMemHostAlloc(CU_MEMHOSTALLOC_PORTABLE)`
/// (freed on drop).
#[derive(Debug)]
pub struct PinnedBuf {
    pub ptr: *mut c_void,
    pub len: usize,
}

impl PinnedBuf {
    /// Allocates and fills `len` bytes (a context must be current).
    pub fn new(len: usize, byte: u8) -> Result<Self, CuError> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags);
        // SAFETY: out-pointer to a local; PORTABLE makes the memory pinned
        // for every context, which the staged GPU->GPU copy relies on.
        check("cuMemHostAlloc", unsafe {
            sys::cuMemHostAlloc(&mut ptr, len.max(1), sys::CU_MEMHOSTALLOC_PORTABLE as c_uint)
        })?;
        // SAFETY: `len` bytes were just allocated at `ptr`.
        unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), byte, len) };
        Ok(PinnedBuf { ptr, len })
    }
}

impl Drop for PinnedBuf {
    fn drop(&mut self) {
        // CUresult cuMemFreeHost(void *p);
        // SAFETY: `ptr` came from cuMemHostAlloc; errors are moot here.
        let _ = unsafe { sys::cuMemFreeHost(self.ptr) };
    }
}

/// A stream of the current context (destroyed on drop).
#[derive(Debug)]
pub struct Stream {
    pub raw: CUstream,
}

impl Stream {
    /// `cuStreamCreate(CU_STREAM_NON_BLOCKING)` in the current context.
    pub fn new_non_blocking() -> Result<Self, CuError> {
        let mut raw: CUstream = std::ptr::null_mut();
        // CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags);
        // SAFETY: out-pointer to a local; a context is current.
        check("cuStreamCreate", unsafe {
            sys::cuStreamCreate(&mut raw, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint)
        })?;
        Ok(Stream { raw })
    }

    /// `cuStreamSynchronize`.
    pub fn synchronize(&self) -> Result<(), CuError> {
        // CUresult cuStreamSynchronize(CUstream hStream);
        // SAFETY: `raw` is a live stream.
        check("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(self.raw) })
    }

    /// Fills `n` 32-bit words at `dst` with `value`, in stream order
    /// (`cuMemsetD32Async`, not a copy).
    pub fn memset_d32(&self, dst: CUdeviceptr, value: u32, n: usize) -> Result<(), CuError> {
        // CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream);
        // SAFETY: callers pass a device range of at least 4*n bytes.
        check("cuMemsetD32Async", unsafe {
            sys::cuMemsetD32Async(dst, value, n, self.raw)
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // CUresult cuStreamDestroy(CUstream hStream);  (exported as _v2)
        // SAFETY: `raw` is a live stream; errors are moot here.
        let _ = unsafe { sys::cuStreamDestroy_v2(self.raw) };
    }
}

/// Synchronous device-to-host copy (`cuMemcpyDtoH`); returns once the
/// bytes are in `dst`.
pub fn copy_dtoh(dst: &mut [u8], src: CUdeviceptr) -> Result<(), CuError> {
    // CUresult cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);  (exported as _v2)
    // SAFETY: `dst` is a live host slice of the copied length; callers
    // pass a device range at least that long.
    check("cuMemcpyDtoH", unsafe {
        sys::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), src, dst.len())
    })
}
