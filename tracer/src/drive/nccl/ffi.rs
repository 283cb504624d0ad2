//! libnccl, opened with `dlopen` and called through a table of function
//! pointers.
//!
//! Why not `cudarc::nccl`: its loader looks for `libnccl.so`,
//! `libnccl.so.{13,12,11,10,9,1}` and a few others, never `libnccl.so.2`,
//! the name NCCL's runtime packages (Debian's libnccl2, pip's
//! nvidia-nccl-cu13) install; without the -dev symlink it panics. Here the
//! names tried are `libnccl.so.2`, then `libnccl.so`. The C types come from
//! `cudarc::nccl::sys`; enums cross the boundary as `int` (as C passes
//! them), so an unknown result code from a newer NCCL cannot be undefined
//! behaviour.
use std::ffi::{CStr, CString, c_char, c_int, c_void};

use cudarc::nccl::sys::{ncclComm_t, ncclUniqueId};

use crate::drive::cuda_copy::cu::dlerror_text;

/// Library names tried, in order.
pub const LIBNCCL_NAMES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];

/// `ncclDataType_t` values used here (nccl.h).
pub const NCCL_INT32: c_int = 2;
pub const NCCL_FLOAT32: c_int = 7;
/// `ncclRedOp_t` values used here (nccl.h).
pub const NCCL_SUM: c_int = 0;
pub const NCCL_MAX: c_int = 2;

/// An NCCL failure, one line.
#[derive(Clone, Debug, thiserror::Error)]
pub enum NcclFfiError {
    #[error("no NCCL: libnccl.so.2 could not be loaded ({0}); put the directory holding it on LD_LIBRARY_PATH")]
    NoLibrary(String),
    #[error("NCCL library {lib} lacks {sym}")]
    MissingSymbol { lib: String, sym: &'static str },
    #[error("{call} failed: {name} ({desc}){last}")]
    Call {
        call: &'static str,
        code: c_int,
        name: &'static str,
        desc: String,
        last: String,
    },
}

// ncclResult_t  ncclGetVersion(int *version);
type GetVersionFn = unsafe extern "C" fn(*mut c_int) -> c_int;
// ncclResult_t  ncclGetUniqueId(ncclUniqueId* uniqueId);
type GetUniqueIdFn = unsafe extern "C" fn(*mut ncclUniqueId) -> c_int;
// ncclResult_t  ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
type CommInitRankFn = unsafe extern "C" fn(*mut ncclComm_t, c_int, ncclUniqueId, c_int) -> c_int;
// ncclResult_t  ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
//     ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
type AllReduceFn =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, ncclComm_t, *mut c_void) -> c_int;
// ncclResult_t  ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
//     ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
type AllGatherFn = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, ncclComm_t, *mut c_void) -> c_int;
// ncclResult_t  ncclCommDestroy(ncclComm_t comm);
// ncclResult_t  ncclCommAbort(ncclComm_t comm);
type CommFn = unsafe extern "C" fn(ncclComm_t) -> c_int;
// const char*  ncclGetErrorString(ncclResult_t result);
type GetErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;
// const char*  ncclGetLastError(ncclComm_t comm);   (NCCL >= 2.13)
type GetLastErrorFn = unsafe extern "C" fn(ncclComm_t) -> *const c_char;

/// The loaded library (kept loaded for the life of the process).
pub struct Nccl {
    /// Path of the file dlopen mapped (from dladdr), or the name used.
    pub path: String,
    get_version: GetVersionFn,
    get_unique_id: GetUniqueIdFn,
    comm_init_rank: CommInitRankFn,
    all_reduce: AllReduceFn,
    all_gather: AllGatherFn,
    comm_destroy: CommFn,
    comm_abort: CommFn,
    get_error_string: GetErrorStringFn,
    get_last_error: Option<GetLastErrorFn>,
}

fn result_name(code: c_int) -> &'static str {
    match code {
        0 => "ncclSuccess",
        1 => "ncclUnhandledCudaError",
        2 => "ncclSystemError",
        3 => "ncclInternalError",
        4 => "ncclInvalidArgument",
        5 => "ncclInvalidUsage",
        6 => "ncclRemoteError",
        7 => "ncclInProgress",
        8 => "ncclTimeout",
        _ => "ncclResult?",
    }
}

impl Nccl {
    /// Opens libnccl (`libnccl.so.2`, then `libnccl.so`) and resolves every
    /// symbol used.
    pub fn load() -> Result<Self, NcclFfiError> {
        let mut first_err = None;
        let mut handle = std::ptr::null_mut();
        let mut used = "";
        for name in LIBNCCL_NAMES {
            let c = CString::new(name).map_err(|e| NcclFfiError::NoLibrary(e.to_string()))?;
            // SAFETY: NUL-terminated name. The handle is never closed: the
            // function pointers below must stay valid for the process.
            let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            if h.is_null() {
                first_err.get_or_insert_with(dlerror_text);
            } else {
                handle = h;
                used = name;
                break;
            }
        }
        if handle.is_null() {
            return Err(NcclFfiError::NoLibrary(first_err.unwrap_or_else(|| "not found".into())));
        }
        let sym = |s: &'static str| -> Result<*mut c_void, NcclFfiError> {
            let c = CString::new(s).map_err(|_| NcclFfiError::MissingSymbol {
                lib: used.to_string(),
                sym: s,
            })?;
            // SAFETY: `handle` is a live dlopen handle; `c` is NUL-terminated.
            let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
            if p.is_null() {
                Err(NcclFfiError::MissingSymbol {
                    lib: used.to_string(),
                    sym: s,
                })
            } else {
                Ok(p)
            }
        };
        let get_version = sym("ncclGetVersion")?;
        let path = dl_path(get_version).unwrap_or_else(|| used.to_string());
        // SAFETY (all transmutes below): each pointer is the address of the
        // NCCL function of that name, whose C prototype is pasted above its
        // type alias; a data pointer and a fn pointer have the same size.
        unsafe {
            Ok(Nccl {
                path,
                get_version: std::mem::transmute::<*mut c_void, GetVersionFn>(get_version),
                get_unique_id: std::mem::transmute::<*mut c_void, GetUniqueIdFn>(sym("ncclGetUniqueId")?),
                comm_init_rank: std::mem::transmute::<*mut c_void, CommInitRankFn>(sym("ncclCommInitRank")?),
                all_reduce: std::mem::transmute::<*mut c_void, AllReduceFn>(sym("ncclAllReduce")?),
                all_gather: std::mem::transmute::<*mut c_void, AllGatherFn>(sym("ncclAllGather")?),
                comm_destroy: std::mem::transmute::<*mut c_void, CommFn>(sym("ncclCommDestroy")?),
                comm_abort: std::mem::transmute::<*mut c_void, CommFn>(sym("ncclCommAbort")?),
                get_error_string: std::mem::transmute::<*mut c_void, GetErrorStringFn>(sym("ncclGetErrorString")?),
                get_last_error: sym("ncclGetLastError")
                    .ok()
                    .map(|p| std::mem::transmute::<*mut c_void, GetLastErrorFn>(p)),
            })
        }
    }

    fn check(&self, call: &'static str, code: c_int, comm: Option<ncclComm_t>) -> Result<(), NcclFfiError> {
        if code == 0 {
            return Ok(());
        }
        // const char* ncclGetErrorString(ncclResult_t result);
        // SAFETY: ncclGetErrorString accepts any code and returns a static
        // NUL-terminated string (or NULL).
        let p = unsafe { (self.get_error_string)(code) };
        let desc = if p.is_null() {
            format!("code {code}")
        } else {
            // SAFETY: non-null and NUL-terminated (above).
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        };
        let mut last = String::new();
        if let Some(f) = self.get_last_error {
            // const char* ncclGetLastError(ncclComm_t comm);
            // SAFETY: takes a communicator or NULL; returns a NUL-terminated
            // string owned by NCCL (or NULL).
            let p = unsafe { f(comm.unwrap_or(std::ptr::null_mut())) };
            if !p.is_null() {
                // SAFETY: non-null and NUL-terminated (above).
                let s = unsafe { CStr::from_ptr(p) }.to_string_lossy();
                let s = s.trim().replace('\n', " ");
                if !s.is_empty() {
                    last = format!(": {s}");
                }
            }
        }
        Err(NcclFfiError::Call {
            call,
            code,
            name: result_name(code),
            desc,
            last,
        })
    }

    /// `ncclGetVersion`, as `major.minor.patch`.
    pub fn version(&self) -> Result<String, NcclFfiError> {
        let mut v: c_int = 0;
        // ncclResult_t ncclGetVersion(int *version);
        // SAFETY: out-pointer to a local.
        let rc = unsafe { (self.get_version)(&mut v) };
        self.check("ncclGetVersion", rc, None)?;
        Ok(format_version(v))
    }

    /// `ncclGetUniqueId`: starts this process's bootstrap root, which must
    /// stay alive until every rank has initialised its communicator.
    pub fn unique_id(&self) -> Result<ncclUniqueId, NcclFfiError> {
        let mut id = ncclUniqueId { internal: [0; 128] };
        // ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
        // SAFETY: out-pointer to a local ncclUniqueId.
        let rc = unsafe { (self.get_unique_id)(&mut id) };
        self.check("ncclGetUniqueId", rc, None)?;
        Ok(id)
    }

    /// `ncclCommInitRank`; the CUDA context of this rank's device must be
    /// current. Blocks until all `nranks` ranks have joined.
    pub fn comm_init_rank(&self, nranks: usize, id: ncclUniqueId, rank: usize) -> Result<Comm<'_>, NcclFfiError> {
        let mut comm: ncclComm_t = std::ptr::null_mut();
        let n = c_int::try_from(nranks).unwrap_or(c_int::MAX);
        let r = c_int::try_from(rank).unwrap_or(c_int::MAX);
        // ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
        // SAFETY: out-pointer to a local; the id is passed by value.
        let rc = unsafe { (self.comm_init_rank)(&mut comm, n, id, r) };
        self.check("ncclCommInitRank", rc, None)?;
        Ok(Comm {
            lib: self,
            raw: comm,
            destroyed: false,
        })
    }
}

/// NCCL encodes 2.9+ versions as major*10000 + minor*100 + patch, older
/// ones as major*1000 + minor*100 + patch.
pub fn format_version(v: c_int) -> String {
    if v >= 10000 {
        format!("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100)
    } else {
        format!("{}.{}.{}", v / 1000, (v % 1000) / 100, v % 100)
    }
}

/// The file that holds `addr`, from `dladdr`.
fn dl_path(addr: *mut c_void) -> Option<String> {
    // SAFETY: an all-zero Dl_info is a valid value of the plain C struct.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `addr` is a symbol address from dlsym; out-pointer to a local.
    if unsafe { libc::dladdr(addr.cast_const(), &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is non-null and NUL-terminated (set by dladdr).
    Some(unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned())
}

/// A communicator: destroyed by [`Comm::destroy`], aborted if dropped
/// without it (an error path).
pub struct Comm<'a> {
    lib: &'a Nccl,
    raw: ncclComm_t,
    destroyed: bool,
}

impl Comm<'_> {
    /// `ncclAllReduce` of `count` elements on `stream`.
    ///
    /// # Safety
    /// `send` and `recv` are device buffers of this rank's device holding at
    /// least `count` elements of `dtype`; `stream` is a live stream of the
    /// current context.
    pub unsafe fn all_reduce(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: c_int,
        op: c_int,
        stream: *mut c_void,
    ) -> Result<(), NcclFfiError> {
        // ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
        //     ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
        // SAFETY: per this function's contract.
        let rc = unsafe {
            (self.lib.all_reduce)(
                send as *const c_void,
                recv as *mut c_void,
                count,
                dtype,
                op,
                self.raw,
                stream,
            )
        };
        self.lib.check("ncclAllReduce", rc, Some(self.raw))
    }

    /// `ncclAllGather` of `sendcount` elements per rank on `stream`.
    ///
    /// # Safety
    /// `send` holds `sendcount` and `recv` `nranks * sendcount` elements of
    /// `dtype`, on this rank's device; `stream` is a live stream of the
    /// current context.
    pub unsafe fn all_gather(
        &self,
        send: u64,
        recv: u64,
        sendcount: usize,
        dtype: c_int,
        stream: *mut c_void,
    ) -> Result<(), NcclFfiError> {
        // ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
        //     ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
        // SAFETY: per this function's contract.
        let rc = unsafe {
            (self.lib.all_gather)(
                send as *const c_void,
                recv as *mut c_void,
                sendcount,
                dtype,
                self.raw,
                stream,
            )
        };
        self.lib.check("ncclAllGather", rc, Some(self.raw))
    }

    /// `ncclCommDestroy` (after the caller has synchronised its stream).
    pub fn destroy(mut self) -> Result<(), NcclFfiError> {
        self.destroyed = true;
        // ncclResult_t ncclCommDestroy(ncclComm_t comm);
        // SAFETY: `raw` is a live communicator, released once.
        let rc = unsafe { (self.lib.comm_destroy)(self.raw) };
        self.lib.check("ncclCommDestroy", rc, None)
    }
}

impl Drop for Comm<'_> {
    fn drop(&mut self) {
        if !self.destroyed {
            // ncclResult_t ncclCommAbort(ncclComm_t comm);
            // SAFETY: `raw` is a live communicator, released once; errors
            // are moot on this (failure) path.
            let _ = unsafe { (self.lib.comm_abort)(self.raw) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_format() {
        assert_eq!(format_version(22707), "2.27.7");
        assert_eq!(format_version(2804), "2.8.4");
    }
}
