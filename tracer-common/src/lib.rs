//! The ABI shared by gdrtrace's eBPF programs and its user space.
//!
//! Everything here is `#[repr(C)]`, `Copy`, and free of `bool`, `Option` and
//! Rust enums, so the same bytes mean the same thing on both sides. Op codes
//! and flags are plain `u32`s; user space names op codes through its probe
//! table and catalog (`probes::ops`).
#![no_std]

/// Default size of the event ring buffer in bytes (must be a power of two and
/// a multiple of the page size). Overridable at load time. 8 MiB holds about
/// 80,000 records: 80 ms at a million events per second, enough to ride out
/// the reader being descheduled on a busy machine (docs/perf.md).
pub const RINGBUF_BYTES: u32 = 8 << 20;
/// Maximum number of traced processes (thread-group ids) in the target set.
pub const MAX_TARGETS: u32 = 16384;
/// Syscall numbers the raw `sys_enter`/`sys_exit` dispatch table covers.
pub const MAX_SYSCALLS: u32 = 512;
/// Maximum number of threads whose current CUDA context is kept (`CUR_CTX`).
pub const MAX_THREADS: u32 = 16384;
/// Maximum number of calls in flight (entered, not yet returned) at once.
pub const MAX_INFLIGHT: u32 = 16384;
/// Number of op codes the in-kernel aggregation tables have room for.
pub const MAX_OPS: u32 = 256;
/// Number of log2 latency slots per op: slot `i` holds `[2^i, 2^(i+1))` ns,
/// the last slot holds everything longer (clamped, like libbpf-tools).
pub const MAX_SLOTS: u32 = 40;
/// Number of captured argument registers per call.
pub const MAX_ARGS: usize = 6;

/// Target-set filter modes (global `FILTER_MODE`).
pub mod filter {
    /// Every process is traced.
    pub const ALL: u32 = 0;
    /// Only processes in the `TARGETS` map (and their descendants) are traced.
    pub const TARGETS: u32 = 1;
}

/// Kinds of records in the event ring buffer.
pub mod kind {
    /// A completed call: entry and return matched for one thread.
    pub const CALL: u32 = 1;
    /// A task created a child process or thread (`sched_process_fork`).
    pub const FORK: u32 = 2;
    /// A thread-group leader exited (`sched_process_exit`).
    pub const EXIT: u32 = 3;
    /// A process called exec (`sched_process_exec`).
    pub const EXEC: u32 = 4;
    /// An entry-only op's record (no return probe, so no duration or return
    /// value): a thread's context change (`op_flags::TRACK_CTX`), or the
    /// first call of an aggregated row (`op_flags::SAMPLE_FIRST`).
    pub const ENTRY: u32 = 5;
    /// A process outside the target set opened a file that marks it as a
    /// GPU or RDMA process (`gdrtrace serve`'s discovery): `args[0]` is the
    /// `discover::*` reason, `args[1]` the fd the open returned, `args[2]`
    /// 0 when the kernel has just added the process to the target set, 1
    /// when it was a target already and opened a library.
    pub const DISCOVER: u32 = 6;
    /// The first successful call of a copy row (`op_flags::COPY_ROWS`): a
    /// `CALL` record in every field but `ret`, which carries the row's
    /// handle (the call returned 0). Its later calls are summed in
    /// `COPY_ROWS` under that handle; this record is one of them.
    pub const ROW_FIRST: u32 = 7;
}

/// Per-op flags (`OpConfig::flags`).
pub mod op_flags {
    /// Aggregate in the kernel only (count + log2 latency slots), no event.
    pub const AGGREGATE_ONLY: u32 = 1;
    /// Aggregate-only ops: bytes are the (non-negative) return value rather
    /// than count x data-type size.
    pub const BYTES_FROM_RET: u32 = 2;
    /// No return probe: everything happens at entry (aggregate-only ops sum
    /// calls and bytes there; no latency). Halves the traps of hot calls.
    pub const ENTRY_ONLY: u32 = 4;
    /// Entry-only context switch (`cuCtxSetCurrent(ctx)`): the entry keeps
    /// the thread's current context (`args[0]`) in `CUR_CTX` and emits an
    /// event only when it changed, so a job that sets the same context on
    /// every API call costs a trap and a map lookup, not an event.
    pub const TRACK_CTX: u32 = 8;
    /// Aggregate-only ops: the call that creates a (process, op, handle)
    /// row is also evented (`kind::ENTRY`, its arguments as captured), so
    /// user space learns what one call of each row pointed at (the memory
    /// behind a UCX send buffer) without an event per call.
    pub const SAMPLE_FIRST: u32 = 16;
    /// A row of the duty-cycled `Sampled` link (collectives, group and
    /// UCX data calls): while `control::SAMPLE_OFF` is set its entries
    /// return at once, so an off phase starts exactly when user space says
    /// so, whatever the kernel still needs to close the links.
    pub const SAMPLED: u32 = 32;
    /// A copy, with its return probe: a successful call is summed in
    /// `COPY_ROWS` per (process, op, row), where the row's handle is a hash
    /// of the arguments in `OpConfig::key_args` (addresses and contexts)
    /// tagged with the process's region epoch; bytes from `count_arg`. The call
    /// that creates a row is evented (`kind::ROW_FIRST`), so user space
    /// classifies the row once, with what it knows at that point of the
    /// stream; a failed call (ret != 0) is evented as a `CALL`, and so is
    /// every call while the table is full (`counter::COPY_ROWS_FULL`).
    pub const COPY_ROWS: u32 = 64;
    /// Allocations, frees, registrations, mappings, peer access: at a
    /// return, after its record, the process's region epoch (`COPY_EPOCH`)
    /// moves on, so the next call of every copy row starts a new row, which
    /// user space classifies after it has seen this change.
    pub const REGION: u32 = 128;
    /// The call takes an `ncclUniqueId` (`OpConfig::id_src` says where):
    /// the entry hashes it into the arguments (`nccl_id`). Only the rare
    /// `ncclCommInitRank*` rows set it.
    pub const NCCL_ID: u32 = 256;
    /// Aggregate-only rows with a return probe: a failed call (`ret < 0`)
    /// is evented as a `CALL` instead of summed, so its error is counted
    /// (cuFile reads and writes).
    pub const FAIL_EVENTS: u32 = 1024;
    /// Aggregate-only rows: `count_arg` points to the byte count (8 bytes
    /// read from user memory at the call: `cuFileReadAsync`'s `size_p`).
    pub const COUNT_DEREF: u32 = 2048;
    /// A row of the droppable `Setup` link (context switches, set-up
    /// calls a running library repeats): once `control::SETUP_OFF` is set
    /// its entries return at once, and a return whose entry came after
    /// that is no loss, so the link closes without a call half-seen.
    pub const SETUP: u32 = 512;
}

/// Indices of the `CONTROL` array, written by user space while tracing.
pub mod control {
    /// Non-zero once the tracing window closed: every program returns at
    /// once, so probes that fire while links are being closed neither
    /// record nor count as drops.
    pub const STOPPED: u32 = 0;
    /// The agent's own tgid (`gdrtrace serve`): discovery never adds it,
    /// whatever it opens (NVML opens `/dev/nvidiactl`).
    pub const AGENT_TGID: u32 = 1;
    /// Non-zero while the sampled rows (`op_flags::SAMPLED`) are in an off
    /// phase of their duty cycle: their links are closed or closing, and
    /// whatever still fires is neither counted nor lost.
    pub const SAMPLE_OFF: u32 = 2;
    /// The on phase of the sampled rows that counts: the links of each on
    /// phase carry its number in their attach cookies' upper half
    /// ([`super::sample_cookie`]), and only the links whose number is this
    /// one count. The links of earlier on phases may still be waiting to
    /// be closed while a later one counts; their traps run every program
    /// attached to the point, so without this each call would count once
    /// per link still attached.
    pub const SAMPLE_GEN: u32 = 3;
    /// The copy rows' generation, part of every row's tag
    /// ([`super::copy_row_tag`]): user space moves it on to start every
    /// row anew when the table fills, and reclaims the old rows once their
    /// totals are final.
    pub const COPY_GEN: u32 = 4;
    /// Non-zero once the set-up links went over budget
    /// (`op_flags::SETUP`): they are being closed, and their rows count
    /// no more calls.
    pub const SETUP_OFF: u32 = 5;
    /// Number of slots.
    pub const COUNT: u32 = 6;
}

/// The attach cookie of a library probe: its op code in the lower half,
/// and for the sampled rows the on phase its link belongs to in the upper
/// half (`control::SAMPLE_GEN`; 0 for every other link).
#[inline(always)]
pub const fn sample_cookie(op: u32, generation: u32) -> u64 {
    ((generation as u64) << 32) | op as u64
}

/// Default fill level (bytes) of the ring buffer above which a record wakes
/// the reader; below it records are submitted without a wake-up and the
/// reader drains them on its tick. Overridable at load time.
pub const WAKEUP_BYTES: u32 = 64 * 1024;

/// Op codes. Kernel-side ops are fixed here; library ops (uprobes) use the
/// range from [`op::USER_BASE`] and are numbered by the user-space probe table.
pub mod op {
    pub const NONE: u32 = 0;
    /// `io_uring_register(2)`, from the syscall tracepoints.
    pub const IO_URING_REGISTER: u32 = 1;
    /// `getppid(2)` from its syscall tracepoint: never in the catalog; only
    /// the pipeline benchmark attaches it, as a cheap event source.
    pub const BENCH_GETPPID: u32 = 6;
    /// Socket data syscalls, aggregated per (process, socket fd) in the
    /// kernel. Bytes are the return values (what the kernel actually moved).
    pub const SENDTO: u32 = 2;
    pub const SENDMSG: u32 = 3;
    pub const RECVFROM: u32 = 4;
    pub const RECVMSG: u32 = 5;
    /// Positional file I/O and ioctls, aggregated per (process, fd) in the
    /// kernel like the socket rows (bytes: the return value), and sampled
    /// with the duty cycle's `control::SAMPLE_OFF`: cuFile's compat mode
    /// moves a file's bytes with `pread`/`pwrite` through host bounce
    /// buffers, and nvidia-fs is driven by ioctls on `/dev/nvidia-fsN`.
    pub const PREAD64: u32 = 8;
    pub const PWRITE64: u32 = 9;
    pub const PREADV: u32 = 10;
    pub const PWRITEV: u32 = 11;
    pub const PREADV2: u32 = 12;
    pub const PWRITEV2: u32 = 13;
    pub const IOCTL: u32 = 14;
    /// The range of those ops (`OP_CONFIG` is read at their entry).
    pub const FILE_FIRST: u32 = PREAD64;
    pub const FILE_LAST: u32 = IOCTL;
    /// Kernel pinning family (fentry/fexit or kprobe/kretprobe).
    pub const PIN_USER_PAGES: u32 = 16;
    pub const PIN_USER_PAGES_FAST: u32 = 17;
    pub const PIN_USER_PAGES_REMOTE: u32 = 18;
    pub const PIN_USER_PAGES_UNLOCKED: u32 = 19;
    pub const GET_USER_PAGES: u32 = 20;
    pub const GET_USER_PAGES_FAST: u32 = 21;
    pub const GET_USER_PAGES_REMOTE: u32 = 22;
    pub const GET_USER_PAGES_UNLOCKED: u32 = 23;
    pub const UNPIN_USER_PAGES: u32 = 24;
    pub const UNPIN_USER_PAGES_DIRTY_LOCK: u32 = 25;
    pub const UNPIN_USER_PAGE: u32 = 26;
    pub const UNPIN_FOLIO: u32 = 27;
    pub const UNPIN_USER_FOLIO: u32 = 28;
    pub const UNPIN_USER_PAGE_RANGE_DIRTY_LOCK: u32 = 29;
    /// Kernel verbs family.
    pub const IB_UMEM_GET: u32 = 32;
    pub const IB_UMEM_RELEASE: u32 = 33;
    pub const IB_UMEM_DMABUF_GET: u32 = 34;
    pub const IB_UMEM_DMABUF_GET_PINNED: u32 = 35;
    pub const UVERBS_REG_MR: u32 = 36;
    pub const UVERBS_DEREG_MR: u32 = 37;
    /// Peer-memory family (NVIDIA P2P API).
    pub const NV_P2P_GET_PAGES: u32 = 48;
    pub const NV_P2P_GET_PAGES_PERSISTENT: u32 = 49;
    pub const NV_P2P_PUT_PAGES: u32 = 50;
    pub const NV_P2P_DMA_MAP_PAGES: u32 = 51;
    pub const NV_P2P_DMA_UNMAP_PAGES: u32 = 52;
    /// dma-buf family.
    pub const DMA_BUF_DYNAMIC_ATTACH: u32 = 64;
    pub const DMA_BUF_MAP_ATTACHMENT: u32 = 65;
    pub const DMA_BUF_MAP_ATTACHMENT_UNLOCKED: u32 = 66;
    pub const DMA_BUF_UNMAP_ATTACHMENT: u32 = 67;
    pub const DMA_BUF_UNMAP_ATTACHMENT_UNLOCKED: u32 = 68;
    pub const DMA_BUF_DETACH: u32 = 69;
    /// PCI peer-to-peer DMA mapping (cuFile's P2PDMA mode: NVMe to GPU
    /// memory without nvidia-fs), aggregated per process.
    pub const P2PDMA_MAP_SEGMENT: u32 = 72;
    pub const P2PDMA_MAP_TYPE: u32 = 73;
    /// First op code of library (uprobe) operations.
    pub const USER_BASE: u32 = 128;
}

/// Indices of the per-CPU `COUNTERS` array: things that must never be lost
/// silently.
pub mod counter {
    /// `bpf_ringbuf_reserve` failed: an event was dropped.
    pub const RINGBUF_DROPS: u32 = 0;
    /// The in-flight table was full at entry: a call was not timed.
    pub const INFLIGHT_FULL: u32 = 1;
    /// A return without a recorded entry (attached mid-call, or table full).
    pub const RETURN_WITHOUT_ENTRY: u32 = 2;
    /// The target set was full when a child should have been added.
    pub const TARGETS_FULL: u32 = 3;
    /// A probe read (argument or tracepoint field) failed.
    pub const READ_ERRORS: u32 = 4;
    /// The per-communicator aggregation table was full.
    pub const AGGREGATE_FULL: u32 = 5;
    /// Discovery could not read the path an `open`/`openat` was given (the
    /// process may have been a GPU or RDMA process).
    pub const DISCOVER_READ_ERRORS: u32 = 6;
    /// Copies evented one by one because the copy-row table was full
    /// (not lost: each is a `CALL` record).
    pub const COPY_ROWS_FULL: u32 = 7;
    /// Traps of sampled rows in an off phase of the duty cycle (their links
    /// still being attached or closed): not lost, not counted, a cost.
    pub const SAMPLE_OFF_TRAPS: u32 = 8;
    /// Runs of a sampled row's program on a link of an earlier on phase
    /// while a later one counted (`control::SAMPLE_GEN`): that link was
    /// still waiting to be closed, and the call was counted once, by the
    /// current link.
    pub const SAMPLE_STALE: u32 = 9;
    /// Number of counters.
    pub const COUNT: u32 = 10;
}

/// Discovery (`gdrtrace serve`): which opened paths make a process a
/// target. One matcher serves the kernel (`open`/`openat` tracepoints) and
/// user space (the `/proc` scan at start), so both agree on what counts.
pub mod discover {
    /// Bytes of a path the matcher looks at (longer paths are cut there).
    pub const PATH_BYTES: usize = 256;
    /// Threads with a matching open in flight (entered, not yet returned).
    pub const MAX_PENDING: u32 = 4096;

    /// Reasons, in `Event::args[0]` of `kind::DISCOVER`.
    pub const NONE: u32 = 0;
    pub const LIBCUDA: u32 = 1;
    pub const LIBNCCL: u32 = 2;
    pub const LIBIBVERBS: u32 = 3;
    pub const DEV_NVIDIA: u32 = 4;
    pub const DEV_INFINIBAND: u32 = 5;
    /// Found by the `/proc` scan at start (user space only).
    pub const PROC_SCAN: u32 = 6;

    /// Library file names: the name itself or the name followed by a
    /// version (`libcuda.so.1`, `libcuda.so.580.159.04`), not `libcudart.so`.
    const LIBS: [(&[u8], u32); 3] = [
        (b"libcuda.so", LIBCUDA),
        (b"libnccl.so", LIBNCCL),
        (b"libibverbs.so", LIBIBVERBS),
    ];

    /// How far back from the end of a path the file name is looked for: a
    /// longer file name is none of the table's.
    pub const NAME_BYTES: usize = 64;

    /// `path[i]`, with the index masked to the buffer so the BPF verifier
    /// sees the access in bounds. The index goes through a volatile read:
    /// otherwise LLVM proves the mask useless from the caller's checks and
    /// drops it, and the verifier, which cannot follow that proof, refuses
    /// the load.
    #[inline(always)]
    fn byte(path: &[u8; PATH_BYTES], i: usize) -> u8 {
        // SAFETY: reads a local.
        let i = unsafe { core::ptr::read_volatile(&i) };
        path[i & (PATH_BYTES - 1)]
    }

    /// Whether `pat` is at `path[at..len]`.
    #[inline(always)]
    fn at(path: &[u8; PATH_BYTES], at: usize, len: usize, pat: &[u8]) -> bool {
        if at + pat.len() > len {
            return false;
        }
        let mut j = 0;
        while j < pat.len() {
            if byte(path, at + j) != pat[j] {
                return false;
            }
            j += 1;
        }
        true
    }

    /// The reason a path of `len` bytes (no NUL) makes its opener a target,
    /// or `NONE`. Only `path[..len]` is read, so a reused buffer cannot
    /// match stale text.
    ///
    /// The file name is found by walking back from the end at most
    /// `NAME_BYTES`: a forward scan for the last '/' makes the verifier
    /// follow every (name start, path end) pair and gives up (E2BIG).
    #[inline(always)]
    pub fn match_path(path: &[u8; PATH_BYTES], len: usize) -> u32 {
        let len = if len > PATH_BYTES - 1 { PATH_BYTES - 1 } else { len };
        if at(path, 0, len, b"/dev/nvidia") {
            return DEV_NVIDIA;
        }
        if at(path, 0, len, b"/dev/infiniband/") {
            return DEV_INFINIBAND;
        }
        let mut base = len.saturating_sub(NAME_BYTES);
        let mut k = 0;
        while k < NAME_BYTES && k < len {
            let i = len - 1 - k;
            if byte(path, i) == b'/' {
                base = i + 1;
                break;
            }
            k += 1;
        }
        let mut n = 0;
        while n < LIBS.len() {
            let (name, reason) = LIBS[n];
            let end = base + name.len();
            if at(path, base, len, name) && (end == len || byte(path, end) == b'.') {
                return reason;
            }
            n += 1;
        }
        NONE
    }

    /// `match_path` for a path held in a byte slice (user space).
    pub fn match_bytes(path: &[u8]) -> u32 {
        let mut buf = [0u8; PATH_BYTES];
        let n = if path.len() < PATH_BYTES {
            path.len()
        } else {
            PATH_BYTES - 1
        };
        buf[..n].copy_from_slice(&path[..n]);
        match_path(&buf, n)
    }
}

/// Per-op configuration set by user space (`OP_CONFIG` array).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpConfig {
    /// `op_flags::*`.
    pub flags: u32,
    /// Bit `i` set: `args[i]` is a user-space out-pointer; at return it is
    /// replaced by the 8 bytes it points to (allocated address, fd, handle).
    pub deref_args: u32,
    /// Unless `u32::MAX`: at return, read 8 bytes of user memory at
    /// `ret + ret_read_offset` into `args[5]` (e.g. `struct ibv_mr` keys),
    /// or at `args[read_arg] + ret_read_offset` where `read_arg` is set.
    pub ret_read_offset: u32,
    /// For aggregate-only ops: argument indices of the element count, the
    /// NCCL data type and the communicator handle (`NO_ARG` when absent).
    /// The kernel sums calls and bytes per (process, op, communicator).
    pub count_arg: u8,
    pub dtype_arg: u8,
    pub handle_arg: u8,
    /// Copy rows (`op_flags::COPY_ROWS`): bit `i` set, `args[i]` is part
    /// of the row's identity (the addresses, and the contexts of a peer
    /// copy; not the size or the stream).
    pub key_args: u8,
    /// With `op_flags::NCCL_ID`: where the call's `ncclUniqueId` is
    /// (`nccl_id::ON_STACK`, or the index of the argument that points to
    /// it). The entry hashes it into `args[nccl_id::HASH_ARG]` and
    /// `args[nccl_id::LEGACY_HASH_ARG]`.
    pub id_src: u8,
    /// With `ret_read_offset`: the argument (as the entry saw it) whose
    /// pointee is read instead of the returned pointer's (`NO_ARG`: the
    /// return value), e.g. the fd in `cuFileHandleRegister`'s descriptor.
    pub read_arg: u8,
    pub _pad: [u8; 2],
}
const _: () = assert!(core::mem::size_of::<OpConfig>() == 20);

/// The handle of a copy row: a hash of the arguments in `key_args` in
/// its lower bits, and the row's tag ([`copy_row_tag`]) in its upper
/// [`COPY_TAG_BITS`] (never 0). The kernel computes it at each successful
/// call; user space reads it back from `kind::ROW_FIRST` and from the
/// tag tells the rows no call can reach any more ([`copy_tag_of`]).
#[inline(always)]
pub fn copy_row_handle(op: u32, key_args: u8, args: &[u64; MAX_ARGS], tag: u16) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = ((op as u64) << 32).wrapping_mul(K);
    let mut i = 0;
    while i < MAX_ARGS {
        if key_args & (1 << i) != 0 {
            h = (h ^ args[i]).wrapping_mul(K);
            h ^= h >> 29;
        }
        i += 1;
    }
    (h >> COPY_TAG_BITS) | ((tag as u64) << (64 - COPY_TAG_BITS)) | 1
}

/// Bits of a copy row's handle that hold its tag.
pub const COPY_TAG_BITS: u32 = 16;

/// The tag of the copy rows a process makes now: its region epoch
/// (`COPY_EPOCH`) plus the table's generation (`control::COPY_GEN`), cut
/// to [`COPY_TAG_BITS`]. Either moving on starts every row of the process
/// anew: the epoch at a region change, the generation when user space
/// renews the whole table.
#[inline(always)]
pub const fn copy_row_tag(epoch: u64, generation: u64) -> u16 {
    epoch.wrapping_add(generation) as u16
}

/// The tag in a copy row's handle.
pub const fn copy_tag_of(handle: u64) -> u16 {
    (handle >> (64 - COPY_TAG_BITS)) as u16
}

/// Whether a row tagged `row` is older than `now`, a tag the process had
/// since: tags move forward, modulo 2^16, so "older" is the half of the
/// circle behind `now`.
pub const fn copy_tag_older(row: u16, now: u16) -> bool {
    let behind = now.wrapping_sub(row);
    behind != 0 && behind < 1 << (COPY_TAG_BITS - 1)
}

/// Processes whose region epoch the kernel keeps (`COPY_EPOCH`, LRU).
pub const MAX_EPOCH_PROCS: u32 = 16384;

/// "No such argument" in `OpConfig`'s argument indices.
pub const NO_ARG: u8 = 0xff;
/// Maximum number of (process, op, communicator) aggregation rows.
pub const MAX_AGG_ROWS: u32 = 8192;
/// Maximum number of copy rows (`COPY_ROWS`: one shared value per row,
/// about 80 bytes with the table's own, so 5 MiB whatever the CPU count).
/// A 32 MiB buffer staged in 8 KiB fragments is 4,104 rows a process.
pub const MAX_COPY_ROWS: u32 = 65536;

/// Key of the in-kernel per-communicator aggregation.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AggKey {
    pub tgid: u32,
    pub op: u32,
    /// Communicator (or other handle) the call was made on; 0 if none.
    pub handle: u64,
}
const _: () = assert!(core::mem::size_of::<AggKey>() == 16);

/// Value of the per-communicator aggregation (per CPU).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct AggValue {
    pub calls: u64,
    pub bytes: u64,
}
const _: () = assert!(core::mem::size_of::<AggValue>() == 16);

/// NCCL's communicator identity: the 128-byte `ncclUniqueId` that every
/// rank passes to `ncclCommInitRank*`, hashed the way NCCL hashes it into
/// its `commHash` (printed as `commId 0x...` in its `Init START`/`Init
/// COMPLETE` lines). The hash is computed at the probe's entry (the id is
/// on the caller's stack only then) by these functions, which user space
/// shares and tests, so there is one definition of each.
pub mod nccl_id {
    /// `NCCL_UNIQUE_ID_BYTES` (nccl.h).
    pub const BYTES: usize = 128;
    /// The id as little-endian 64-bit words (how NCCL's `eatHash` reads it).
    pub const WORDS: usize = BYTES / 8;
    /// `OpConfig::id_src`: the id is passed by value. x86-64 SysV passes a
    /// 128-byte struct in memory, so at the function's entry it is at the
    /// stack pointer + 8 (above the return address), and the integer
    /// arguments after it move up one register.
    pub const ON_STACK: u8 = 0xfe;
    /// The argument slots the entry overwrites with the hashes (`hash`,
    /// `hash_legacy`); rows with an id leave them free. Both 0: the id
    /// could not be read.
    pub const HASH_ARG: usize = 4;
    pub const LEGACY_HASH_ARG: usize = 5;

    /// NCCL 2.26 and later: `getHash(id, 128)` of `src/include/bitops.h`
    /// (`eatHash` into `acc = {1, 1}`, then `digestHash`).
    #[inline(always)]
    pub fn hash(words: &[u64; WORDS]) -> u64 {
        let mut a0: u64 = 1 ^ BYTES as u64;
        let mut a1: u64 = 1;
        let mut i = 0;
        while i < WORDS {
            a0 = a0.wrapping_add(a1);
            a1 ^= a0;
            a0 ^= a0 >> 31;
            a0 = a0.wrapping_mul(0x9de6_2bbc_8cef_3ce3);
            a1 ^= a1 >> 32;
            a1 = a1.wrapping_mul(0x485c_d631_1b59_9e79);
            a0 = a0.wrapping_add(words[i]);
            i += 1;
        }
        let mut h = a0;
        h ^= h >> 31;
        h = h.wrapping_mul(0xbac3_bd56_2846_de6b);
        h = h.wrapping_add(a1);
        h ^= h >> 32;
        h.wrapping_mul(0x995a_187a_14e7_b445)
    }

    /// NCCL up to 2.25: `getHash(const char *string, int n)` of
    /// `src/misc/utils.cc` (2.25: `bitops.h`), DJB2a over the bytes as
    /// `char`, which is signed on x86-64, so bytes from 0x80 are
    /// sign-extended before the xor.
    #[inline(always)]
    pub fn hash_legacy(words: &[u64; WORDS]) -> u64 {
        let mut h: u64 = 5381;
        let mut i = 0;
        while i < WORDS {
            let w = words[i];
            let mut k = 0;
            while k < 8 {
                let c = (w >> (8 * k)) as u8 as i8 as i64 as u64;
                h = (h << 5).wrapping_add(h) ^ c;
                k += 1;
            }
            i += 1;
        }
        h
    }
}

/// Size in bytes of an `ncclDataType_t` (nccl.h: int8, uint8, int32,
/// uint32, int64, uint64, half, float, double, bfloat16, fp8e4m3, fp8e5m2).
#[inline(always)]
pub fn nccl_dtype_size(dtype: u64) -> u64 {
    match dtype {
        0 | 1 | 10 | 11 => 1,
        6 | 9 => 2,
        2 | 3 | 7 => 4,
        4 | 5 | 8 => 8,
        _ => 0,
    }
}

/// Key of the in-flight table: one call of one op on one thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InflightKey {
    /// The full `bpf_get_current_pid_tgid()` value (tgid << 32 | tid).
    pub pid_tgid: u64,
    pub op: u32,
    pub _pad: u32,
}
const _: () = assert!(core::mem::size_of::<InflightKey>() == 16);

/// Value of the in-flight table: what the entry saw.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Inflight {
    pub start_ns: u64,
    pub args: [u64; MAX_ARGS],
}
const _: () = assert!(core::mem::size_of::<Inflight>() == 56);

/// One record of the event ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Event {
    /// `kind::*`.
    pub kind: u32,
    /// `op::*` (or the library op from the uprobe cookie).
    pub op: u32,
    /// Thread-group id (process id) and thread id of the caller.
    pub pid: u32,
    pub tid: u32,
    /// Entry time (CLOCK_MONOTONIC, ns) and duration entry→return (ns).
    pub start_ns: u64,
    pub dur_ns: u64,
    /// Captured argument registers, as the entry saw them. For `FORK`,
    /// `args[0]` is the child pid; for `EXIT`/`EXEC` unused.
    pub args: [u64; MAX_ARGS],
    /// Return value (register), sign-extended.
    pub ret: i64,
    /// Command name of the caller, in lifecycle and discovery records only
    /// (`FORK`, `EXIT`, `EXEC`, `DISCOVER`); zero in `CALL` and `ENTRY`
    /// records, whose process user space names from procfs or, once it has
    /// gone, from its `EXIT` record (`has_comm`).
    pub comm: [u8; 16],
}
const _: () = assert!(core::mem::size_of::<Event>() == 104);

/// Whether records of this kind carry the caller's command name: the
/// per-call records leave it out, since the helper and its zero padding were
/// a measurable part of a traced syscall's cost (docs/perf.md).
pub const fn has_comm(kind: u32) -> bool {
    kind != kind::CALL && kind != kind::ENTRY && kind != kind::ROW_FIRST
}

/// Log2 latency slot of a duration in ns, clamped to `MAX_SLOTS - 1`.
#[inline(always)]
pub fn log2_slot(ns: u64) -> u32 {
    // Branch-only log2 (as libbpf-tools' bits.bpf.h): the BPF backend has no
    // count-leading-zeros instruction.
    let mut v = ns;
    let mut r: u32 = 0;
    if v >> 32 != 0 {
        v >>= 32;
        r += 32;
    }
    if v >> 16 != 0 {
        v >>= 16;
        r += 16;
    }
    if v >> 8 != 0 {
        v >>= 8;
        r += 8;
    }
    if v >> 4 != 0 {
        v >>= 4;
        r += 4;
    }
    if v >> 2 != 0 {
        v >>= 2;
        r += 2;
    }
    if v >> 1 != 0 {
        r += 1;
    }
    if r >= MAX_SLOTS { MAX_SLOTS - 1 } else { r }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain `#[repr(C)]` integers and arrays with explicit padding.
    unsafe impl aya::Pod for super::Event {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::InflightKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Inflight {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::OpConfig {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::AggKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::AggValue {}
}
