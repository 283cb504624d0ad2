//! Maps and load-time globals shared by every probe family.
use aya_ebpf::{
    Global,
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, PerCpuHashMap, RingBuf},
};
use tracer_common::{
    AggKey, AggValue, Inflight, InflightKey, MAX_AGG_ROWS, MAX_COPY_ROWS, MAX_EPOCH_PROCS, MAX_INFLIGHT, MAX_OPS,
    MAX_SLOTS, MAX_SYSCALLS, MAX_TARGETS, MAX_THREADS, OpConfig, RINGBUF_BYTES, WAKEUP_BYTES, control, counter,
};

/// `filter::ALL` or `filter::TARGETS`; set by the loader.
#[unsafe(no_mangle)]
pub static FILTER_MODE: Global<u32> = Global::new(0);
/// Byte offset of `child_pid` in the `sched_process_fork` record; read from
/// tracefs at load time because the layout changed (6.1: `char[16]` comms,
/// later kernels: `__data_loc` strings).
#[unsafe(no_mangle)]
pub static FORK_CHILD_PID_OFFSET: Global<u32> = Global::new(44);

/// Ring-buffer fill level (bytes) from which a record wakes the reader; set
/// by the loader. Below it records are submitted without a wake-up.
#[unsafe(no_mangle)]
pub static WAKEUP_AT: Global<u32> = Global::new(WAKEUP_BYTES);

/// Index: `control::*`. Value: written by user space while tracing (the
/// stop switch).
#[map]
pub static CONTROL: Array<u64> = Array::with_max_entries(control::COUNT, 0);

/// Index: syscall number. Value: the op of the catalog point that traces
/// it through the generic raw syscall tracepoints (0: not traced).
#[map]
pub static SYSCALL_OPS: Array<u32> = Array::with_max_entries(MAX_SYSCALLS, 0);

/// Index: op. Value: per-CPU count of entries of traced processes (every
/// hit, entry-only ops included): call counts and the hit rate the planner
/// budgets.
#[map]
pub static HITS: PerCpuArray<u64> = PerCpuArray::with_max_entries(MAX_OPS, 0);

/// Key: thread id. Value: the CUDA context it last made current
/// (`op_flags::TRACK_CTX`); LRU, so exited threads age out.
#[map]
pub static CUR_CTX: LruHashMap<u32, u64> = LruHashMap::with_max_entries(MAX_THREADS, 0);

/// Completed calls and process lifecycle records, drained by user space.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(RINGBUF_BYTES, 0);

/// Key: thread-group id being traced. Value: tgid of the process that put it
/// there (0 for processes named by user space).
#[map]
pub static TARGETS: HashMap<u32, u32> = HashMap::with_max_entries(MAX_TARGETS, 0);

/// Key: (pid_tgid, op): one slot per thread and op, rewritten by each call.
/// Value: the last entry's time and arguments; `start_ns` is 0 once its
/// return consumed it. LRU, so the slots of exited threads age out; an
/// evicted slot of a call still in flight shows as
/// `counter::RETURN_WITHOUT_ENTRY`.
#[map]
pub static INFLIGHT: LruHashMap<InflightKey, Inflight> = LruHashMap::with_max_entries(MAX_INFLIGHT, 0);

/// Index: `counter::*`. Value: per-CPU count of losses and errors.
#[map]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

/// Index: op. Value: its configuration (flags, out-pointers), set by user space.
#[map]
pub static OP_CONFIG: Array<OpConfig> = Array::with_max_entries(MAX_OPS, 0);

/// Index: op * MAX_SLOTS + log2(latency ns). Value: per-CPU call count. Every
/// completed call lands here, evented or not.
#[map]
pub static LATENCY: PerCpuArray<u64> = PerCpuArray::with_max_entries(MAX_OPS * MAX_SLOTS, 0);

/// Key: (tgid, op, communicator). Value: per-CPU calls and bytes of
/// aggregate-only ops (collectives), so hot calls cost no event.
#[map]
pub static AGGREGATE: PerCpuHashMap<AggKey, AggValue> = PerCpuHashMap::with_max_entries(MAX_AGG_ROWS, 0);

/// Key: (tgid, op, copy row handle). Value: calls and bytes of the row's
/// successful copies, one value for all CPUs (added atomically): per-CPU
/// values would cost the table's size times the CPU count, and a row's
/// copies come from one thread as a rule.
#[map]
pub static COPY_ROWS: HashMap<AggKey, AggValue> = HashMap::with_max_entries(MAX_COPY_ROWS, 0);

/// Key: tgid. Value: the process's region epoch, moved on at the return
/// of every call that changes what backs its addresses
/// (`op_flags::REGION`); part of each copy row's handle. LRU, so exited
/// processes age out.
#[map]
pub static COPY_EPOCH: LruHashMap<u32, u64> = LruHashMap::with_max_entries(MAX_EPOCH_PROCS, 0);

/// Whether user space closed the tracing window (`control::STOPPED`).
#[inline(always)]
pub fn stopped() -> bool {
    CONTROL.get(control::STOPPED).is_some_and(|v| *v != 0)
}

/// Whether a trap of a sampled row, on a link of on phase `generation`
/// (its cookie's upper half), goes uncounted, and the counter it goes to:
/// an off phase (`control::SAMPLE_OFF`: the links are being attached or
/// closed), or a link of an earlier on phase still waiting to be closed
/// while a later one counts (`control::SAMPLE_GEN`: the later link counts
/// the call).
#[inline(always)]
pub fn sample_skip(generation: u32) -> Option<u32> {
    if CONTROL.get(control::SAMPLE_OFF).is_some_and(|v| *v != 0) {
        return Some(counter::SAMPLE_OFF_TRAPS);
    }
    let current = CONTROL.get(control::SAMPLE_GEN).copied().unwrap_or(0);
    (generation as u64 != current).then_some(counter::SAMPLE_STALE)
}

/// Whether the set-up links went over budget (`control::SETUP_OFF`).
#[inline(always)]
pub fn setup_off() -> bool {
    CONTROL.get(control::SETUP_OFF).is_some_and(|v| *v != 0)
}

/// Bumps a per-CPU slot of a per-CPU array.
#[inline(always)]
pub fn bump(array: &PerCpuArray<u64>, index: u32) {
    if let Some(p) = array.get_ptr_mut(index) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU.
        unsafe { *p += 1 };
    }
}

/// Bumps a per-CPU counter.
#[inline(always)]
pub fn count(index: u32) {
    bump(&COUNTERS, index);
}
