//! The user-space probe table: one row per library function (or family of
//! exported variants), served by the one generic uprobe/uretprobe pair in
//! `tracer-ebpf/src/uapi.rs`. A row's op code is `op::USER_BASE + index`;
//! it travels as the attach cookie.
use serde::Serialize;
use tracer_common::{OpConfig, nccl_id, op, op_flags};

use super::kinds::{Family, Group};

/// Libraries the table covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Lib {
    Cuda,
    Ibverbs,
    Nccl,
    /// UCX's protocol layer (workers, endpoints, memory mapping, data calls).
    Ucp,
    /// UCX's transport layer (memory-domain registration).
    Uct,
    /// UCX's services (the registration cache).
    Ucs,
    /// cuFile, GPUDirect Storage's library (`libcufile.so.0`: the CUDA
    /// toolkit's, and the copy Python wheels ship in `nvidia/cu13/lib`).
    Cufile,
}

impl Lib {
    pub const ALL: [Lib; 7] = [
        Lib::Cuda,
        Lib::Ibverbs,
        Lib::Nccl,
        Lib::Ucp,
        Lib::Uct,
        Lib::Ucs,
        Lib::Cufile,
    ];

    /// File-name stem (`libcuda.so`, `libcuda.so.1`, `libcuda.so.580.1` match).
    pub fn stem(self) -> &'static str {
        match self {
            Lib::Cuda => "libcuda.so",
            Lib::Ibverbs => "libibverbs.so",
            Lib::Nccl => "libnccl.so",
            Lib::Ucp => "libucp.so",
            Lib::Uct => "libuct.so",
            Lib::Ucs => "libucs.so",
            Lib::Cufile => "libcufile.so",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Lib::Cuda => "libcuda",
            Lib::Ibverbs => "libibverbs",
            Lib::Nccl => "libnccl",
            Lib::Ucp => "libucp",
            Lib::Uct => "libuct",
            Lib::Ucs => "libucs",
            Lib::Cufile => "libcufile",
        }
    }

    /// The probe family the library's rows report under.
    pub fn family(self) -> Family {
        match self {
            Lib::Cuda => Family::Cuda,
            Lib::Ibverbs => Family::Ibverbs,
            Lib::Nccl => Family::Nccl,
            Lib::Ucp | Lib::Uct | Lib::Ucs => Family::Ucx,
            Lib::Cufile => Family::Gds,
        }
    }

    /// Which library a mapped file is, by its file name. Copies that Python
    /// wheels vendor count too: auditwheel renames them with a hash
    /// (`nixl_cu13.libs/libucp-b39b3ed9.so.0.0.0`, `libibverbs-1de1263b.so.1`).
    pub fn of_path(path: &str) -> Option<Lib> {
        let file = unvendored(path.rsplit('/').next()?);
        Lib::ALL
            .into_iter()
            .find(|l| file == l.stem() || file.starts_with(&format!("{}.", l.stem())))
    }
}

/// A library file name without the 8-hex-digit hash auditwheel inserts
/// before `.so` when it vendors a library into a wheel.
fn unvendored(file: &str) -> std::borrow::Cow<'_, str> {
    if let Some(i) = file.find(".so")
        && let Some((base, hash)) = file[..i].rsplit_once('-')
        && hash.len() == 8
        && hash.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return format!("{base}{}", &file[i..]).into();
    }
    file.into()
}

/// How an argument register is interpreted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Arg {
    /// Not captured / not meaningful.
    Skip,
    /// An address (device or host pointer).
    Addr,
    /// A byte count.
    Bytes,
    /// An element count.
    Count,
    /// An opaque handle (context, PD, QP, communicator, stream).
    Handle,
    /// An integer (flags, device ordinal, fd, rank).
    Int,
    /// An out-pointer: the eBPF return probe replaces it with the value it
    /// points to (the allocated address, exported fd, new communicator).
    Out,
}

/// What the operation is, for the registry and classification.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    GpuAlloc,
    GpuFree,
    HostAlloc,
    HostFree,
    HostRegister,
    HostUnregister,
    Copy,
    DmabufExport,
    IpcImport,
    IpcExport,
    Map,
    PeerAccess,
    MrRegister,
    MrDeregister,
    Setup,
    CommInit,
    CommEnd,
    Collective,
    PointToPoint,
    Group,
    CommRegister,
    /// UCX worker creation (`ucp_worker_create`).
    UcxWorker,
    /// UCX endpoint creation (`ucp_ep_create`).
    UcxEndpoint,
    /// UCX memory mapping: `ucp_mem_map` (registers with every memory
    /// domain) and `ucp_mem_unmap`.
    UcxMemMap,
    UcxMemUnmap,
    /// Registration with one UCT memory domain (`uct_md_mem_reg[_v2]`) and
    /// its release.
    UcxMdReg,
    UcxMdDereg,
    /// A registration-cache lookup (`ucs_rcache_get`).
    UcxRcacheGet,
    /// A region inserted into a UCS page table (`ucs_pgtable_insert`):
    /// inside `ucs_rcache_get`, the cache missed and made a new region.
    UcxRegionInsert,
    /// UCX data calls (send, put, get, AM and stream send, receives
    /// posted): aggregated per (process, op, endpoint or worker).
    UcxData,
    /// cuFile's driver: `cuFileDriverOpen` (compat mode or nvidia-fs is
    /// decided here), `cuFileDriverClose`, `cuFileDriverGetProperties`.
    CufileDriverOpen,
    CufileDriverClose,
    CufileProperties,
    /// A file handle registered (`cuFileHandleRegister`: the fd behind it)
    /// and deregistered.
    CufileHandleRegister,
    CufileHandleDeregister,
    /// A GPU buffer registered with cuFile (`cuFileBufRegister`) and
    /// released: an unregistered buffer is bounced through cuFile's own.
    CufileBufRegister,
    CufileBufDeregister,
    /// cuFile reads and writes, synchronous and stream-ordered: aggregated
    /// per (process, op, file handle).
    CufileIo,
    /// Batch I/O: set-up, submissions (aggregated per batch) and release.
    CufileBatchSetUp,
    CufileBatchSubmit,
    CufileBatchDestroy,
}

/// What a function returns, and so how its return value says it succeeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Returns {
    /// A status code, 0 on success: `CUresult`, `ncclResult_t`,
    /// `ucs_status_t`, and the `int` of `ibv_dereg_mr`, `ibv_rereg_mr` and
    /// `ibv_modify_qp`.
    Status,
    /// A pointer to the object the call made, NULL on failure
    /// (`struct ibv_mr *`, `struct ibv_pd *`, `struct ibv_qp *`).
    Object,
    /// cuFile's `CUfileError_t {CUfileOpError err; CUresult cu_err}`, eight
    /// bytes returned in `rax`: `err` (the low half) is 0 on success.
    CufileError,
    /// A byte count, negative on failure (`ssize_t cuFileRead`).
    Size,
    /// Nothing (`void cuFileHandleDeregister`): never fails.
    Void,
}

/// One row of the table.
#[derive(Clone, Copy, Debug)]
pub struct Row {
    pub lib: Lib,
    /// Base symbol; exported variants (`_v2`, `_v3`, `_ptds`, `_ptsz` and
    /// combinations, and every ELF symbol version) are attached too.
    pub symbol: &'static str,
    /// Name in reports.
    pub name: &'static str,
    pub kind: Kind,
    pub args: &'static [Arg],
    /// What the function returns (the success rule: [`Row::succeeded`]).
    pub returns: Returns,
    /// Offset into the returned struct to read 8 bytes from (into `args[5]`),
    /// e.g. `struct ibv_mr` lkey/rkey at 36.
    pub ret_read: Option<u32>,
    /// Aggregate in the kernel only (high-rate calls).
    pub aggregate: bool,
    /// For aggregated rows: argument indices of the element count, the
    /// NCCL data type and the communicator (summed per communicator).
    pub coll: Option<(u8, u8, u8)>,
    /// A set-up fact that running programs also call on every API call
    /// (`cuCtxSetCurrent`: ~15 per NCCL iteration, 897,281 calls in 14 s of
    /// a torch job). Entry-only and evented only when the thread's context
    /// changes (`op_flags::TRACK_CTX`), in a link of its own that the
    /// tracer closes when its hit rate goes over budget (`trace.rs`).
    pub hot_setup: bool,
    /// Traced with entry and return like any row, but in the droppable
    /// `Setup` link: a set-up path that a running job can also take on
    /// every transfer (`ucs_rcache_get` runs once per rendezvous send when
    /// the application passes no memory handle).
    pub budgeted: bool,
    /// Aggregated rows: the first call of each (process, op, handle) row is
    /// evented too (`op_flags::SAMPLE_FIRST`), so the memory behind its
    /// buffer argument can be looked up.
    pub sample_first: bool,
    /// Where the call's `ncclUniqueId` is: `nccl_id::ON_STACK` (passed by
    /// value) or the index of the argument pointing to it. The entry hashes
    /// it into `args[nccl_id::HASH_ARG]` and `args[nccl_id::LEGACY_HASH_ARG]`
    /// (`tracer_common::nccl_id`), which the row leaves free.
    pub unique_id: Option<u8>,
    /// Aggregated rows with a return probe: bytes are the return value
    /// (what the call moved), failures are evented, and the kernel's
    /// latency slots time every call (cuFile reads and writes).
    pub ret_bytes: bool,
    /// With `ret_read`: read behind this argument (as the entry saw it)
    /// instead of behind the returned pointer.
    pub read_arg: Option<u8>,
    /// Aggregated rows: the count argument points to the byte count.
    pub count_deref: bool,
}

impl Row {
    /// Whether a call of this row succeeded, by its return value. Every
    /// stage asks the row (the registry, the classifier): one rule.
    pub const fn succeeded(&self, ret: i64) -> bool {
        match self.returns {
            Returns::Status => ret == 0,
            Returns::Object => ret != 0,
            Returns::CufileError => ret as i32 == 0,
            Returns::Size => ret >= 0,
            Returns::Void => true,
        }
    }

    /// The object a successful call made or changed: the returned pointer,
    /// or for a call that returns a status its first argument (the MR
    /// `ibv_rereg_mr` changed).
    pub const fn object(&self, args: &[u64; tracer_common::MAX_ARGS], ret: i64) -> u64 {
        match self.returns {
            Returns::Object => ret as u64,
            Returns::Status | Returns::CufileError | Returns::Size | Returns::Void => args[0],
        }
    }

    /// A copy between two contexts, `cuMemcpyPeer(dst, dstCtx, src, srcCtx, n)`
    /// (and its async form), by its argument layout.
    pub fn peer_copy(&self) -> bool {
        matches!(self.kind, Kind::Copy)
            && matches!(
                self.args,
                [Arg::Addr, Arg::Handle, Arg::Addr, Arg::Handle, Arg::Bytes, ..]
            )
    }

    /// Index of the first argument of a kind (`Arg::Addr`: the address a
    /// call registers; `Arg::Bytes`: its length).
    pub fn arg(&self, kind: Arg) -> Option<usize> {
        self.args.iter().position(|a| *a == kind)
    }

    /// No return probe: aggregated rows (counts and bytes are arguments)
    /// and context switches.
    pub const fn entry_only(&self) -> bool {
        (self.aggregate && !self.ret_bytes) || self.hot_setup
    }

    /// The link the row's offsets join: context switches and budgeted
    /// set-up paths in the droppable `Setup` link; UCX's data calls and
    /// CUDA copies, a whole message or buffer each, in `Exact` links until
    /// hot; the other rows a running job calls per transfer (collectives,
    /// group calls, cuFile I/O, all summed in the kernel) in the
    /// duty-cycled `Sampled` link.
    pub const fn group(&self) -> Group {
        if self.hot_setup || self.budgeted {
            Group::Setup
        } else if matches!(self.kind, Kind::UcxData) || self.copy_rows() {
            Group::Exact
        } else if self.aggregate {
            Group::Sampled
        } else {
            Group::Steady
        }
    }

    /// Copies: summed in the kernel per (process, op, address pair), with
    /// the first call of each pair, and every failure, evented
    /// (`op_flags::COPY_ROWS`). The return probe stays: it says whether the
    /// call failed and times it.
    pub const fn copy_rows(&self) -> bool {
        matches!(self.kind, Kind::Copy)
    }

    /// Calls that change what backs a process's addresses (allocations,
    /// frees, registrations, mappings, peer access): each return starts a
    /// new epoch of copy rows (`op_flags::REGION`). Not the contexts'
    /// set-up: a context's device is fixed, and a library may retain the
    /// primary context around every copy (UCX's cuda_copy), which would
    /// make every copy a row of its own.
    pub const fn changes_regions(&self) -> bool {
        !self.entry_only()
            && matches!(
                self.kind,
                Kind::GpuAlloc
                    | Kind::GpuFree
                    | Kind::HostAlloc
                    | Kind::HostFree
                    | Kind::HostRegister
                    | Kind::HostUnregister
                    | Kind::IpcImport
                    | Kind::Map
                    | Kind::PeerAccess
            )
    }

    /// Traps per call: one for entry-only rows, two with a return probe
    /// (what the duty cycle's budget counts).
    pub const fn traps_per_call(&self) -> u64 {
        if self.entry_only() { 1 } else { 2 }
    }

    /// The arguments that tell one copy row from another: addresses, and
    /// the contexts before the size (a peer copy's); not the size, the
    /// stream or a descriptor's contents.
    pub fn key_args(&self) -> u8 {
        let bytes = self
            .args
            .iter()
            .position(|a| *a == Arg::Bytes)
            .unwrap_or(self.args.len());
        self.args
            .iter()
            .enumerate()
            .filter(|(i, a)| **a == Arg::Addr || (**a == Arg::Handle && *i < bytes))
            .fold(0, |m, (i, _)| m | (1 << i))
    }
}

use Arg::*;

const fn row(lib: Lib, symbol: &'static str, name: &'static str, kind: Kind, args: &'static [Arg]) -> Row {
    Row {
        lib,
        symbol,
        name,
        kind,
        args,
        returns: Returns::Status,
        ret_read: None,
        aggregate: false,
        coll: None,
        hot_setup: false,
        budgeted: false,
        sample_first: false,
        unique_id: None,
        ret_bytes: false,
        read_arg: None,
        count_deref: false,
    }
}

/// A communicator init that takes an `ncclUniqueId` (`Row::unique_id`).
const fn with_id(mut r: Row, at: u8) -> Row {
    r.unique_id = Some(at);
    r
}

const fn budgeted(mut r: Row) -> Row {
    r.budgeted = true;
    r
}

/// A UCX data call: aggregated in the kernel per (process, op, endpoint or
/// worker) with its byte count (the contiguous datatype UCX uses unless the
/// caller passes another: `count` is bytes), entry-only, with the first
/// call of each row evented for its buffer. The buffer is the argument just
/// before the count in every UCX data call.
const fn ucx_data(mut r: Row, count: u8, handle: u8) -> Row {
    r.aggregate = true;
    r.sample_first = true;
    r.coll = Some((count, tracer_common::NO_ARG, handle));
    r
}

/// A cuFile call that returns a `CUfileError_t`.
const fn cufile(mut r: Row) -> Row {
    r.returns = Returns::CufileError;
    r
}

/// A call that returns nothing.
const fn void(mut r: Row) -> Row {
    r.returns = Returns::Void;
    r
}

/// `ret_read` behind argument `arg` rather than the returned pointer.
const fn read_behind(mut r: Row, arg: u8, offset: u32) -> Row {
    r.ret_read = Some(offset);
    r.read_arg = Some(arg);
    r
}

/// A cuFile read or write: aggregated per (process, op, file handle) with
/// the bytes it returned; the return probe stays (the kernel's latency
/// slots time each call, a failure is evented) and the first call of each
/// row is evented for its buffer, size and offsets.
const fn cufile_io(mut r: Row) -> Row {
    r.aggregate = true;
    r.sample_first = true;
    r.ret_bytes = true;
    r.returns = Returns::Size;
    r.coll = Some((2, tracer_common::NO_ARG, 0));
    r
}

/// A stream-ordered cuFile read or write: aggregated at submission per
/// (process, op, file handle), its bytes read behind `size_p`.
const fn cufile_async(mut r: Row) -> Row {
    r.aggregate = true;
    r.sample_first = true;
    r.count_deref = true;
    r.returns = Returns::CufileError;
    r.coll = Some((2, tracer_common::NO_ARG, 0));
    r
}

/// A batch submission: aggregated per (process, batch), calls only (the
/// sizes are in the `CUfileIOParams_t` array), its first call evented.
const fn cufile_batch(mut r: Row) -> Row {
    r.aggregate = true;
    r.sample_first = true;
    r.returns = Returns::CufileError;
    r.coll = Some((tracer_common::NO_ARG, tracer_common::NO_ARG, 0));
    r
}

const fn hot_setup(mut r: Row) -> Row {
    r.hot_setup = true;
    r
}
/// A collective: aggregated in the kernel per communicator, with its bytes
/// (count x the size of the NCCL data type).
const fn coll(mut r: Row, count: u8, dtype: u8, comm: u8) -> Row {
    r.aggregate = true;
    r.coll = Some((count, dtype, comm));
    r
}
const fn hot(mut r: Row) -> Row {
    r.aggregate = true;
    r
}
/// A function that returns the object it made (NULL on failure).
const fn object(mut r: Row) -> Row {
    r.returns = Returns::Object;
    r
}
const fn mr(mut r: Row) -> Row {
    // struct ibv_mr { context*, pd*, void *addr; size_t length; u32 handle, lkey, rkey; }
    // lkey at 36, rkey at 40 (rdma-core libibverbs/verbs.h, stable since 1.0).
    r.ret_read = Some(36);
    object(r)
}

/// The table. Prototypes are those of CUDA 13 `cuda.h`, rdma-core 44+
/// `verbs.h` and NCCL 2.2x `nccl.h`.
pub static TABLE: &[Row] = &[
    // CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
    row(Lib::Cuda, "cuMemAlloc", "cuMemAlloc", Kind::GpuAlloc, &[Out, Bytes]),
    // CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
    row(
        Lib::Cuda,
        "cuMemAllocManaged",
        "cuMemAllocManaged",
        Kind::GpuAlloc,
        &[Out, Bytes, Int],
    ),
    // CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t w, size_t h, unsigned int esz);
    row(
        Lib::Cuda,
        "cuMemAllocAsync",
        "cuMemAllocAsync",
        Kind::GpuAlloc,
        &[Out, Bytes, Handle],
    ),
    // CUresult cuMemFree_v2(CUdeviceptr dptr);
    row(Lib::Cuda, "cuMemFree", "cuMemFree", Kind::GpuFree, &[Addr]),
    row(
        Lib::Cuda,
        "cuMemFreeAsync",
        "cuMemFreeAsync",
        Kind::GpuFree,
        &[Addr, Handle],
    ),
    // CUresult cuMemAllocHost_v2(void **pp, size_t bytesize);
    row(
        Lib::Cuda,
        "cuMemAllocHost",
        "cuMemAllocHost",
        Kind::HostAlloc,
        &[Out, Bytes],
    ),
    // CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags);
    row(
        Lib::Cuda,
        "cuMemHostAlloc",
        "cuMemHostAlloc",
        Kind::HostAlloc,
        &[Out, Bytes, Int],
    ),
    // CUresult cuMemFreeHost(void *p);
    row(Lib::Cuda, "cuMemFreeHost", "cuMemFreeHost", Kind::HostFree, &[Addr]),
    // CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags);
    row(
        Lib::Cuda,
        "cuMemHostRegister",
        "cuMemHostRegister",
        Kind::HostRegister,
        &[Addr, Bytes, Int],
    ),
    // CUresult cuMemHostUnregister(void *p);
    row(
        Lib::Cuda,
        "cuMemHostUnregister",
        "cuMemHostUnregister",
        Kind::HostUnregister,
        &[Addr],
    ),
    // CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n);  (+Async: CUstream)
    row(
        Lib::Cuda,
        "cuMemcpyHtoD",
        "cuMemcpyHtoD",
        Kind::Copy,
        &[Addr, Addr, Bytes],
    ),
    row(
        Lib::Cuda,
        "cuMemcpyHtoDAsync",
        "cuMemcpyHtoDAsync",
        Kind::Copy,
        &[Addr, Addr, Bytes, Handle],
    ),
    // CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n);
    row(
        Lib::Cuda,
        "cuMemcpyDtoH",
        "cuMemcpyDtoH",
        Kind::Copy,
        &[Addr, Addr, Bytes],
    ),
    row(
        Lib::Cuda,
        "cuMemcpyDtoHAsync",
        "cuMemcpyDtoHAsync",
        Kind::Copy,
        &[Addr, Addr, Bytes, Handle],
    ),
    // CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n);
    row(
        Lib::Cuda,
        "cuMemcpyDtoD",
        "cuMemcpyDtoD",
        Kind::Copy,
        &[Addr, Addr, Bytes],
    ),
    row(
        Lib::Cuda,
        "cuMemcpyDtoDAsync",
        "cuMemcpyDtoDAsync",
        Kind::Copy,
        &[Addr, Addr, Bytes, Handle],
    ),
    // CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n);  (unified addressing)
    row(Lib::Cuda, "cuMemcpy", "cuMemcpy", Kind::Copy, &[Addr, Addr, Bytes]),
    row(
        Lib::Cuda,
        "cuMemcpyAsync",
        "cuMemcpyAsync",
        Kind::Copy,
        &[Addr, Addr, Bytes, Handle],
    ),
    // CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n);
    row(
        Lib::Cuda,
        "cuMemcpyPeer",
        "cuMemcpyPeer",
        Kind::Copy,
        &[Addr, Handle, Addr, Handle, Bytes],
    ),
    row(
        Lib::Cuda,
        "cuMemcpyPeerAsync",
        "cuMemcpyPeerAsync",
        Kind::Copy,
        &[Addr, Handle, Addr, Handle, Bytes, Handle],
    ),
    // CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *p);  (descriptor in user memory: counted, not sized)
    row(Lib::Cuda, "cuMemcpy2D", "cuMemcpy2D", Kind::Copy, &[Addr]),
    row(Lib::Cuda, "cuMemcpy3D", "cuMemcpy3D", Kind::Copy, &[Addr]),
    // CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr dptr, size_t size,
    //                                        CUmemRangeHandleType type, unsigned long long flags);
    row(
        Lib::Cuda,
        "cuMemGetHandleForAddressRange",
        "cuMemGetHandleForAddressRange",
        Kind::DmabufExport,
        &[Out, Addr, Bytes, Int, Int],
    ),
    // CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle /* 64 B, on the stack */, unsigned int Flags);
    row(
        Lib::Cuda,
        "cuIpcOpenMemHandle",
        "cuIpcOpenMemHandle",
        Kind::IpcImport,
        &[Out, Int],
    ),
    // CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *osHandle, CUmemAllocationHandleType t);
    row(
        Lib::Cuda,
        "cuMemImportFromShareableHandle",
        "cuMemImportFromShareableHandle",
        Kind::IpcImport,
        &[Out, Handle, Int],
    ),
    // CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long flags);
    row(
        Lib::Cuda,
        "cuMemMap",
        "cuMemMap",
        Kind::Map,
        &[Addr, Bytes, Bytes, Handle, Int],
    ),
    // CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev);
    row(
        Lib::Cuda,
        "cuDeviceCanAccessPeer",
        "cuDeviceCanAccessPeer",
        Kind::PeerAccess,
        &[Out, Int, Int],
    ),
    // CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle h,
    //                                       CUmemAllocationHandleType t, unsigned long long flags);
    row(
        Lib::Cuda,
        "cuMemExportToShareableHandle",
        "cuMemExportToShareableHandle",
        Kind::IpcExport,
        &[Out, Handle, Int, Int],
    ),
    // CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
    //                      unsigned long long flags);
    row(
        Lib::Cuda,
        "cuMemCreate",
        "cuMemCreate",
        Kind::Map,
        &[Out, Bytes, Addr, Int],
    ),
    // CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr);
    row(
        Lib::Cuda,
        "cuIpcGetMemHandle",
        "cuIpcGetMemHandle",
        Kind::IpcExport,
        &[Addr, Addr],
    ),
    // CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags);
    row(
        Lib::Cuda,
        "cuCtxEnablePeerAccess",
        "cuCtxEnablePeerAccess",
        Kind::PeerAccess,
        &[Handle, Int],
    ),
    // struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access);
    mr(row(
        Lib::Ibverbs,
        "ibv_reg_mr",
        "ibv_reg_mr",
        Kind::MrRegister,
        &[Handle, Addr, Bytes, Int],
    )),
    // struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access);
    mr(row(
        Lib::Ibverbs,
        "ibv_reg_mr_iova",
        "ibv_reg_mr_iova",
        Kind::MrRegister,
        &[Handle, Addr, Bytes, Addr, Int],
    )),
    // struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access);
    mr(row(
        Lib::Ibverbs,
        "ibv_reg_mr_iova2",
        "ibv_reg_mr_iova2",
        Kind::MrRegister,
        &[Handle, Addr, Bytes, Addr, Int],
    )),
    // struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access);
    mr(row(
        Lib::Ibverbs,
        "ibv_reg_dmabuf_mr",
        "ibv_reg_dmabuf_mr",
        Kind::MrRegister,
        &[Handle, Int, Bytes, Addr, Int, Int],
    )),
    // int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access);
    row(
        Lib::Ibverbs,
        "ibv_rereg_mr",
        "ibv_rereg_mr",
        Kind::MrRegister,
        &[Handle, Int, Handle, Addr, Bytes, Int],
    ),
    // int ibv_dereg_mr(struct ibv_mr *mr);
    row(
        Lib::Ibverbs,
        "ibv_dereg_mr",
        "ibv_dereg_mr",
        Kind::MrDeregister,
        &[Handle],
    ),
    // struct ibv_pd *ibv_alloc_pd(struct ibv_context *context);
    object(row(
        Lib::Ibverbs,
        "ibv_alloc_pd",
        "ibv_alloc_pd",
        Kind::Setup,
        &[Handle],
    )),
    // struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    object(row(
        Lib::Ibverbs,
        "ibv_create_qp",
        "ibv_create_qp",
        Kind::Setup,
        &[Handle, Addr],
    )),
    // struct ibv_qp *ibv_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr);
    object(row(
        Lib::Ibverbs,
        "ibv_create_qp_ex",
        "ibv_create_qp_ex",
        Kind::Setup,
        &[Handle, Addr],
    )),
    // int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
    row(
        Lib::Ibverbs,
        "ibv_modify_qp",
        "ibv_modify_qp",
        Kind::Setup,
        &[Handle, Addr, Int],
    ),
    // ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
    // The 128-byte id is passed in memory (x86-64 SysV), so `rank` is the
    // third integer register, and the id is at the entry's stack pointer + 8.
    with_id(
        row(
            Lib::Nccl,
            "ncclCommInitRank",
            "ncclCommInitRank",
            Kind::CommInit,
            &[Out, Count, Int],
        ),
        nccl_id::ON_STACK,
    ),
    // ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
    //                                     ncclConfig_t *config);
    with_id(
        row(
            Lib::Nccl,
            "ncclCommInitRankConfig",
            "ncclCommInitRankConfig",
            Kind::CommInit,
            &[Out, Count, Int, Addr],
        ),
        nccl_id::ON_STACK,
    ),
    // ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
    //                                       ncclUniqueId *commIds, ncclConfig_t *config);  (NCCL 2.23+)
    // NCCL hashes the first id (`job->commId`); the hashes replace the
    // pointer and the config argument.
    with_id(
        row(
            Lib::Nccl,
            "ncclCommInitRankScalable",
            "ncclCommInitRankScalable",
            Kind::CommInit,
            &[Out, Count, Int, Count],
        ),
        4,
    ),
    // ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist);
    row(
        Lib::Nccl,
        "ncclCommInitAll",
        "ncclCommInitAll",
        Kind::CommInit,
        &[Out, Count, Addr],
    ),
    // ncclResult_t ncclCommDestroy(ncclComm_t comm);  ncclCommAbort(ncclComm_t comm);
    row(
        Lib::Nccl,
        "ncclCommDestroy",
        "ncclCommDestroy",
        Kind::CommEnd,
        &[Handle],
    ),
    row(Lib::Nccl, "ncclCommAbort", "ncclCommAbort", Kind::CommEnd, &[Handle]),
    // ncclResult_t ncclAllReduce(const void *s, void *r, size_t count, ncclDataType_t dt, ncclRedOp_t op,
    //                            ncclComm_t comm, cudaStream_t stream);
    coll(
        row(
            Lib::Nccl,
            "ncclAllReduce",
            "ncclAllReduce",
            Kind::Collective,
            &[Addr, Addr, Count, Int, Int, Handle],
        ),
        2,
        3,
        5,
    ),
    // ncclResult_t ncclAllGather(const void *s, void *r, size_t sendcount, ncclDataType_t dt, ncclComm_t comm, cudaStream_t st);
    coll(
        row(
            Lib::Nccl,
            "ncclAllGather",
            "ncclAllGather",
            Kind::Collective,
            &[Addr, Addr, Count, Int, Handle, Handle],
        ),
        2,
        3,
        4,
    ),
    coll(
        row(
            Lib::Nccl,
            "ncclReduceScatter",
            "ncclReduceScatter",
            Kind::Collective,
            &[Addr, Addr, Count, Int, Int, Handle],
        ),
        2,
        3,
        5,
    ),
    coll(
        row(
            Lib::Nccl,
            "ncclBroadcast",
            "ncclBroadcast",
            Kind::Collective,
            &[Addr, Addr, Count, Int, Int, Handle],
        ),
        2,
        3,
        5,
    ),
    coll(
        row(
            Lib::Nccl,
            "ncclReduce",
            "ncclReduce",
            Kind::Collective,
            &[Addr, Addr, Count, Int, Int, Int],
        ),
        2,
        3,
        tracer_common::NO_ARG,
    ),
    // ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t s);
    coll(
        row(
            Lib::Nccl,
            "ncclSend",
            "ncclSend",
            Kind::PointToPoint,
            &[Addr, Count, Int, Int, Handle, Handle],
        ),
        1,
        2,
        4,
    ),
    coll(
        row(
            Lib::Nccl,
            "ncclRecv",
            "ncclRecv",
            Kind::PointToPoint,
            &[Addr, Count, Int, Int, Handle, Handle],
        ),
        1,
        2,
        4,
    ),
    hot(row(Lib::Nccl, "ncclGroupStart", "ncclGroupStart", Kind::Group, &[])),
    hot(row(Lib::Nccl, "ncclGroupEnd", "ncclGroupEnd", Kind::Group, &[])),
    // ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle);
    row(
        Lib::Nccl,
        "ncclCommRegister",
        "ncclCommRegister",
        Kind::CommRegister,
        &[Handle, Addr, Bytes, Out],
    ),
    row(
        Lib::Nccl,
        "ncclCommDeregister",
        "ncclCommDeregister",
        Kind::CommRegister,
        &[Handle, Handle],
    ),
    // ncclResult_t ncclMemAlloc(void **ptr, size_t size);  ncclMemFree(void *ptr);
    row(Lib::Nccl, "ncclMemAlloc", "ncclMemAlloc", Kind::GpuAlloc, &[Out, Bytes]),
    row(Lib::Nccl, "ncclMemFree", "ncclMemFree", Kind::GpuFree, &[Addr]),
    // Contexts, so allocations get their device and peer access its device
    // pair (appended: earlier rows keep their op codes).
    // CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
    // UCX's cuda_copy transport retains the context around every copy.
    budgeted(row(
        Lib::Cuda,
        "cuDevicePrimaryCtxRetain",
        "cuDevicePrimaryCtxRetain",
        Kind::Setup,
        &[Out, Int],
    )),
    // CUresult cuCtxSetCurrent(CUcontext ctx);  cuCtxPushCurrent_v2(CUcontext ctx);
    hot_setup(row(
        Lib::Cuda,
        "cuCtxSetCurrent",
        "cuCtxSetCurrent",
        Kind::Setup,
        &[Handle],
    )),
    hot_setup(row(
        Lib::Cuda,
        "cuCtxPushCurrent",
        "cuCtxPushCurrent",
        Kind::Setup,
        &[Handle],
    )),
    // UCX (appended). Prototypes of UCX 1.13-1.22 `ucp/api/ucp.h`,
    // `uct/api/uct.h` and `ucs/memory/rcache.h`; ucs_status_t is 0 on success.
    // ucs_status_t ucp_worker_create(ucp_context_h context, const ucp_worker_params_t *params,
    //                                ucp_worker_h *worker_p);
    row(
        Lib::Ucp,
        "ucp_worker_create",
        "ucp_worker_create",
        Kind::UcxWorker,
        &[Handle, Addr, Out],
    ),
    // ucs_status_t ucp_ep_create(ucp_worker_h worker, const ucp_ep_params_t *params, ucp_ep_h *ep_p);
    row(
        Lib::Ucp,
        "ucp_ep_create",
        "ucp_ep_create",
        Kind::UcxEndpoint,
        &[Handle, Addr, Out],
    ),
    // ucs_status_t ucp_mem_map(ucp_context_h context, const ucp_mem_map_params_t *params, ucp_mem_h *memh_p);
    row(
        Lib::Ucp,
        "ucp_mem_map",
        "ucp_mem_map",
        Kind::UcxMemMap,
        &[Handle, Addr, Out],
    ),
    // ucs_status_t ucp_mem_unmap(ucp_context_h context, ucp_mem_h memh);
    row(
        Lib::Ucp,
        "ucp_mem_unmap",
        "ucp_mem_unmap",
        Kind::UcxMemUnmap,
        &[Handle, Handle],
    ),
    // ucs_status_ptr_t ucp_tag_send_nbx(ucp_ep_h ep, const void *buffer, size_t count, ucp_tag_t tag,
    //                                   const ucp_request_param_t *param);
    ucx_data(
        row(
            Lib::Ucp,
            "ucp_tag_send_nbx",
            "ucp_tag_send_nbx",
            Kind::UcxData,
            &[Handle, Addr, Bytes, Int, Addr],
        ),
        2,
        0,
    ),
    // ucs_status_ptr_t ucp_put_nbx(ucp_ep_h ep, const void *buffer, size_t count, uint64_t remote_addr,
    //                              ucp_rkey_h rkey, const ucp_request_param_t *param);
    ucx_data(
        row(
            Lib::Ucp,
            "ucp_put_nbx",
            "ucp_put_nbx",
            Kind::UcxData,
            &[Handle, Addr, Bytes, Addr, Handle, Addr],
        ),
        2,
        0,
    ),
    // ucs_status_ptr_t ucp_get_nbx(ucp_ep_h ep, void *buffer, size_t count, uint64_t remote_addr,
    //                              ucp_rkey_h rkey, const ucp_request_param_t *param);
    ucx_data(
        row(
            Lib::Ucp,
            "ucp_get_nbx",
            "ucp_get_nbx",
            Kind::UcxData,
            &[Handle, Addr, Bytes, Addr, Handle, Addr],
        ),
        2,
        0,
    ),
    // ucs_status_ptr_t ucp_am_send_nbx(ucp_ep_h ep, unsigned id, const void *header, size_t header_length,
    //                                  const void *buffer, size_t count, const ucp_request_param_t *param);
    ucx_data(
        row(
            Lib::Ucp,
            "ucp_am_send_nbx",
            "ucp_am_send_nbx",
            Kind::UcxData,
            &[Handle, Int, Addr, Int, Addr, Bytes],
        ),
        5,
        0,
    ),
    // ucs_status_ptr_t ucp_stream_send_nbx(ucp_ep_h ep, const void *buffer, size_t count,
    //                                      const ucp_request_param_t *param);
    ucx_data(
        row(
            Lib::Ucp,
            "ucp_stream_send_nbx",
            "ucp_stream_send_nbx",
            Kind::UcxData,
            &[Handle, Addr, Bytes, Addr],
        ),
        2,
        0,
    ),
    // ucs_status_ptr_t ucp_tag_recv_nbx(ucp_worker_h worker, void *buffer, size_t count, ucp_tag_t tag,
    //                                   ucp_tag_t tag_mask, const ucp_request_param_t *param);
    // Receives are posted per worker; `count` is the buffer's capacity.
    ucx_data(
        row(
            Lib::Ucp,
            "ucp_tag_recv_nbx",
            "ucp_tag_recv_nbx",
            Kind::UcxData,
            &[Handle, Addr, Bytes, Int, Int, Addr],
        ),
        2,
        0,
    ),
    // ucs_status_t uct_md_mem_reg_v2(uct_md_h md, void *address, size_t length,
    //                                const uct_md_mem_reg_params_t *params, uct_mem_h *memh_p);  (UCX 1.14+)
    // Listed before uct_md_mem_reg so each form keeps its own row: 1.22's
    // uct_md_mem_reg is a wrapper that calls uct_md_mem_reg_v2.
    row(
        Lib::Uct,
        "uct_md_mem_reg_v2",
        "uct_md_mem_reg_v2",
        Kind::UcxMdReg,
        &[Handle, Addr, Bytes, Addr, Out],
    ),
    // ucs_status_t uct_md_mem_reg(uct_md_h md, void *address, size_t length, unsigned flags, uct_mem_h *memh_p);
    row(
        Lib::Uct,
        "uct_md_mem_reg",
        "uct_md_mem_reg",
        Kind::UcxMdReg,
        &[Handle, Addr, Bytes, Int, Out],
    ),
    // ucs_status_t uct_md_mem_dereg_v2(uct_md_h md, const uct_md_mem_dereg_params_t *params);  (1.14+)
    row(
        Lib::Uct,
        "uct_md_mem_dereg_v2",
        "uct_md_mem_dereg_v2",
        Kind::UcxMdDereg,
        &[Handle, Addr],
    ),
    // ucs_status_t uct_md_mem_dereg(uct_md_h md, uct_mem_h memh);
    row(
        Lib::Uct,
        "uct_md_mem_dereg",
        "uct_md_mem_dereg",
        Kind::UcxMdDereg,
        &[Handle, Handle],
    ),
    // ucs_status_t ucs_rcache_get(ucs_rcache_t *rcache, void *address, size_t length,
    //                             [size_t alignment (1.15+),] int prot, void *arg, ucs_rcache_region_t **region_p);
    budgeted(row(
        Lib::Ucs,
        "ucs_rcache_get",
        "ucs_rcache_get",
        Kind::UcxRcacheGet,
        &[Handle, Addr, Bytes],
    )),
    // ucs_status_t ucs_pgtable_insert(ucs_pgtable_t *pgtable, ucs_pgt_region_t *region);
    // A new cache region goes into the rcache's page table here (the
    // region-creating function is static in UCX 1.13, exported only later).
    row(
        Lib::Ucs,
        "ucs_pgtable_insert",
        "ucs_pgtable_insert",
        Kind::UcxRegionInsert,
        &[Handle, Addr],
    ),
    // cuFile (appended). Prototypes of `cufile.h` (libcufile 1.15, CUDA 13.0;
    // unchanged since 1.0 for these calls). `CUfileError_t` is returned in rax.
    // CUfileError_t cuFileDriverOpen(void);
    cufile(row(
        Lib::Cufile,
        "cuFileDriverOpen",
        "cuFileDriverOpen",
        Kind::CufileDriverOpen,
        &[],
    )),
    // CUfileError_t cuFileDriverClose(void);  (and cuFileDriverClose_v2)
    cufile(row(
        Lib::Cufile,
        "cuFileDriverClose",
        "cuFileDriverClose",
        Kind::CufileDriverClose,
        &[],
    )),
    // CUfileError_t cuFileDriverGetProperties(CUfileDrvProps_t *props);
    // props->nvfs = {unsigned major, minor; size_t poll_thresh_size,
    // max_direct_io_size; unsigned dstatusflags, dcontrolflags; ...}: the
    // status and control flags (8 bytes at 24) read into args[5] at return.
    cufile(read_behind(
        row(
            Lib::Cufile,
            "cuFileDriverGetProperties",
            "cuFileDriverGetProperties",
            Kind::CufileProperties,
            &[Addr],
        ),
        0,
        24,
    )),
    // CUfileError_t cuFileHandleRegister(CUfileHandle_t *fh, CUfileDescr_t *descr);
    // descr = {CUfileFileHandleType type; union {int fd; void *handle;} handle;
    // const CUfileFSOps_t *fs_ops}: the fd (8 bytes at 8, low half) into args[5].
    cufile(read_behind(
        row(
            Lib::Cufile,
            "cuFileHandleRegister",
            "cuFileHandleRegister",
            Kind::CufileHandleRegister,
            &[Out, Addr],
        ),
        1,
        8,
    )),
    // void cuFileHandleDeregister(CUfileHandle_t fh);
    void(row(
        Lib::Cufile,
        "cuFileHandleDeregister",
        "cuFileHandleDeregister",
        Kind::CufileHandleDeregister,
        &[Handle],
    )),
    // CUfileError_t cuFileBufRegister(const void *bufPtr_base, size_t length, int flags);
    cufile(row(
        Lib::Cufile,
        "cuFileBufRegister",
        "cuFileBufRegister",
        Kind::CufileBufRegister,
        &[Addr, Bytes, Int],
    )),
    // CUfileError_t cuFileBufDeregister(const void *bufPtr_base);
    cufile(row(
        Lib::Cufile,
        "cuFileBufDeregister",
        "cuFileBufDeregister",
        Kind::CufileBufDeregister,
        &[Addr],
    )),
    // ssize_t cuFileRead(CUfileHandle_t fh, void *bufPtr_base, size_t size, off_t file_offset,
    //                    off_t bufPtr_offset);
    cufile_io(row(
        Lib::Cufile,
        "cuFileRead",
        "cuFileRead",
        Kind::CufileIo,
        &[Handle, Addr, Bytes, Int, Int],
    )),
    // ssize_t cuFileWrite(CUfileHandle_t fh, const void *bufPtr_base, size_t size, off_t file_offset,
    //                     off_t bufPtr_offset);
    cufile_io(row(
        Lib::Cufile,
        "cuFileWrite",
        "cuFileWrite",
        Kind::CufileIo,
        &[Handle, Addr, Bytes, Int, Int],
    )),
    // CUfileError_t cuFileReadAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p,
    //     off_t *file_offset_p, off_t *bufPtr_offset_p, ssize_t *bytes_read_p, CUstream_t stream);
    cufile_async(row(
        Lib::Cufile,
        "cuFileReadAsync",
        "cuFileReadAsync",
        Kind::CufileIo,
        &[Handle, Addr, Addr, Addr, Addr, Addr],
    )),
    // CUfileError_t cuFileWriteAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p,
    //     off_t *file_offset_p, off_t *bufPtr_offset_p, ssize_t *bytes_written_p, CUstream_t stream);
    cufile_async(row(
        Lib::Cufile,
        "cuFileWriteAsync",
        "cuFileWriteAsync",
        Kind::CufileIo,
        &[Handle, Addr, Addr, Addr, Addr, Addr],
    )),
    // CUfileError_t cuFileBatchIOSetUp(CUfileBatchHandle_t *batch_idp, unsigned nr);
    cufile(row(
        Lib::Cufile,
        "cuFileBatchIOSetUp",
        "cuFileBatchIOSetUp",
        Kind::CufileBatchSetUp,
        &[Out, Count],
    )),
    // CUfileError_t cuFileBatchIOSubmit(CUfileBatchHandle_t batch_idp, unsigned nr,
    //                                   CUfileIOParams_t *iocbp, unsigned int flags);
    cufile_batch(row(
        Lib::Cufile,
        "cuFileBatchIOSubmit",
        "cuFileBatchIOSubmit",
        Kind::CufileBatchSubmit,
        &[Handle, Count, Addr, Int],
    )),
    // void cuFileBatchIODestroy(CUfileBatchHandle_t batch_idp);
    void(row(
        Lib::Cufile,
        "cuFileBatchIODestroy",
        "cuFileBatchIODestroy",
        Kind::CufileBatchDestroy,
        &[Handle],
    )),
];

/// Op code of a table row.
pub fn op_of(index: usize) -> u32 {
    op::USER_BASE + index as u32
}

/// The row of a library op code.
pub fn row_of(op: u32) -> Option<(usize, &'static Row)> {
    let i = op.checked_sub(op::USER_BASE)? as usize;
    TABLE.get(i).map(|r| (i, r))
}

/// The row a report names (`Row::name`): a label's kind and library.
pub fn row_named(name: &str) -> Option<&'static Row> {
    TABLE.iter().find(|r| r.name == name)
}

/// The eBPF-side configuration of a row.
pub fn config_of(row: &Row) -> OpConfig {
    let mut deref = 0u32;
    for (i, a) in row.args.iter().enumerate() {
        if *a == Arg::Out {
            deref |= 1 << i;
        }
    }
    let mut flags = 0;
    if row.aggregate {
        flags |= op_flags::AGGREGATE_ONLY;
    }
    if row.entry_only() {
        flags |= op_flags::ENTRY_ONLY;
    }
    if row.hot_setup {
        flags |= op_flags::TRACK_CTX;
    }
    if row.sample_first {
        flags |= op_flags::SAMPLE_FIRST;
    }
    match row.group() {
        Group::Sampled => flags |= op_flags::SAMPLED,
        Group::Setup => flags |= op_flags::SETUP,
        // `op_flags::SAMPLED` is set once the op joins the cycle.
        Group::Steady | Group::Exact => {}
    }
    if row.changes_regions() {
        flags |= op_flags::REGION;
    }
    let bytes_arg = row.args.iter().position(|a| *a == Arg::Bytes).map(|i| i as u8);
    let (count_arg, key_args) = if row.copy_rows() {
        flags |= op_flags::COPY_ROWS;
        (bytes_arg.unwrap_or(tracer_common::NO_ARG), row.key_args())
    } else {
        (row.coll.map_or(tracer_common::NO_ARG, |c| c.0), 0)
    };
    if row.unique_id.is_some() {
        flags |= op_flags::NCCL_ID;
    }
    if row.ret_bytes {
        flags |= op_flags::BYTES_FROM_RET | op_flags::FAIL_EVENTS;
    }
    if row.count_deref {
        flags |= op_flags::COUNT_DEREF;
    }
    OpConfig {
        flags,
        deref_args: deref,
        ret_read_offset: row.ret_read.unwrap_or(u32::MAX),
        count_arg,
        dtype_arg: row.coll.map_or(tracer_common::NO_ARG, |c| c.1),
        handle_arg: row.coll.map_or(tracer_common::NO_ARG, |c| c.2),
        key_args,
        id_src: row.unique_id.unwrap_or(tracer_common::NO_ARG),
        read_arg: row.read_arg.unwrap_or(tracer_common::NO_ARG),
        _pad: [0; 2],
    }
}

/// Whether exported `symbol` is a variant of `base`: the same name or
/// `base_<suffix>` with a suffix CUDA uses for versioned and per-thread
/// default-stream entry points.
pub fn is_variant(symbol: &str, base: &str) -> bool {
    const SUFFIXES: &[&str] = &["v2", "v3", "ptds", "ptsz", "v2_ptds", "v2_ptsz", "v3_ptds", "v3_ptsz"];
    match symbol.strip_prefix(base) {
        Some("") => true,
        Some(rest) => rest.strip_prefix('_').is_some_and(|s| SUFFIXES.contains(&s)),
        None => false,
    }
}

#[cfg(test)]
mod tests;
