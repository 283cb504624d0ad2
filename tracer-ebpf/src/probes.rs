//! The one entry/return body every probe family shares: the stop switch,
//! target filtering, entry bookkeeping keyed by the full `pid_tgid`,
//! in-kernel latency slots and aggregation, and the event record.
//!
//! Cost is what decides the shape: a uprobe trap costs microseconds on the
//! machines this runs on (docs/perf.md), so hot calls are entry-only
//! (`op_flags::ENTRY_ONLY`: no return trap) and aggregated here, and records
//! wake the reader only once the ring buffer holds `WAKEUP_AT` bytes.
use aya_ebpf::{
    bindings::{BPF_NOEXIST, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_user, generated},
};
use tracer_common::{
    AggKey, AggValue, Event, Inflight, InflightKey, MAX_ARGS, MAX_OPS, MAX_SLOTS, OpConfig, control, copy_row_handle,
    copy_row_tag, counter, filter, has_comm, kind, log2_slot, nccl_dtype_size, nccl_id, op_flags,
};

use crate::maps::{
    AGGREGATE, CONTROL, COPY_EPOCH, COPY_ROWS, CUR_CTX, EVENTS, FILTER_MODE, HITS, INFLIGHT, LATENCY, OP_CONFIG,
    SOCK_OWNER, TARGETS, WAKEUP_AT, bump, count, sample_skip, setup_off, stopped,
};

/// Why a probe did not record anything. Fits a register (returned as the
/// program's exit code, which the kernel ignores for tracing programs).
#[repr(u32)]
#[derive(Clone, Copy)]
pub enum Skip {
    NotTraced = 1,
    NoEntry = 2,
    Full = 3,
    BadOp = 4,
    Stopped = 5,
    SampleOff = 6,
    SetupOff = 7,
}
const _: () = assert!(core::mem::size_of::<Skip>() == 4);

impl Skip {
    pub fn code(self) -> u32 {
        self as u32
    }
}

/// Whether the calling process is in the traced set.
#[inline(always)]
pub fn traced(tgid: u32) -> bool {
    if FILTER_MODE.load() == filter::ALL {
        return true;
    }
    // SAFETY: read-only lookup of a plain value.
    unsafe { TARGETS.get(tgid) }.is_some()
}

/// Records a call's entry: for entry-only ops everything happens here;
/// otherwise the arguments wait in `INFLIGHT` for the return.
#[inline(always)]
pub fn on_entry(op: u32, args: [u64; MAX_ARGS]) -> Result<u32, Skip> {
    on_entry_at::<false>(op, 0, args, 0)
}

/// `on_entry` for a uprobe (`UAPI`), which also knows the caller's stack
/// pointer (`sp`, at the function's first instruction): arguments passed in
/// memory are above it. Only the uprobe programs carry the `ncclUniqueId`
/// hashing (`UAPI` is a constant: the kernel-side programs compile without it).
/// `generation`: the on phase of the sampled rows the probe's link belongs
/// to (`control::SAMPLE_GEN`; 0 for every other link).
#[inline(always)]
pub fn on_entry_at<const UAPI: bool>(
    op: u32,
    generation: u32,
    mut args: [u64; MAX_ARGS],
    sp: u64,
) -> Result<u32, Skip> {
    if stopped() {
        return Err(Skip::Stopped);
    }
    if op >= MAX_OPS {
        return Err(Skip::BadOp);
    }
    // Only library rows and the file syscalls are entry-only or sampled;
    // other kernel ops skip the lookup.
    let config = if op >= tracer_common::op::USER_BASE || file_op(op) {
        OP_CONFIG.get(op).copied().unwrap_or_default()
    } else {
        OpConfig::default()
    };
    if config.flags & op_flags::SAMPLED != 0 && sampled_off(op, generation) {
        return Err(Skip::SampleOff);
    }
    // The set-up link is closing: its calls count no more.
    if config.flags & op_flags::SETUP != 0 && setup_off() {
        return Err(Skip::SetupOff);
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    if !traced((pid_tgid >> 32) as u32) {
        return Err(Skip::NotTraced);
    }
    bump(&HITS, op);
    if op >= tracer_common::op::USER_BASE && config.flags & op_flags::ENTRY_ONLY != 0 {
        if config.flags & op_flags::TRACK_CTX != 0 {
            track_ctx(op, pid_tgid, args);
        } else if config.flags & op_flags::AGGREGATE_ONLY != 0 {
            aggregate(op, pid_tgid, &config, &args, 0);
        }
        return Ok(0);
    }
    if UAPI && config.flags & op_flags::NCCL_ID != 0 {
        hash_unique_id(&config, &mut args, sp);
    }
    let key = InflightKey { pid_tgid, op, _pad: 0 };
    // SAFETY: helper without preconditions.
    let start_ns = unsafe { bpf_ktime_get_ns() };
    let value = Inflight { start_ns, args };
    // A thread's slot for an op is created once and rewritten in place after
    // that: a lookup is inlined by the verifier, while an insert and a delete
    // per call (bucket lock, free-list pop and push) were the largest part of
    // the tracer's cost on a syscall-heavy job (docs/perf.md).
    match INFLIGHT.get_ptr_mut(key) {
        // SAFETY: only this thread writes its own (pid_tgid, op) slot.
        Some(slot) => unsafe { *slot = value },
        None => {
            if INFLIGHT.insert(key, value, 0).is_err() {
                count(counter::INFLIGHT_FULL);
                return Err(Skip::Full);
            }
        }
    }
    Ok(0)
}

/// Records a whole call at once, for a tracepoint that fires after it with
/// its result (`sock:sock_send_length`): a kernel op that is aggregate-only
/// (its `OP_CONFIG`), so no in-flight slot and no latency.
#[inline(always)]
pub fn on_call(op: u32, args: [u64; MAX_ARGS], ret: i64) -> Result<u32, Skip> {
    if stopped() {
        return Err(Skip::Stopped);
    }
    if op >= MAX_OPS {
        return Err(Skip::BadOp);
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    if !traced((pid_tgid >> 32) as u32) {
        return Err(Skip::NotTraced);
    }
    bump(&HITS, op);
    let config = OP_CONFIG.get(op).copied().unwrap_or_default();
    aggregate(op, pid_tgid, &config, &args, ret);
    Ok(0)
}

/// Whether `op` is one of the file syscalls (`op::FILE_FIRST..=FILE_LAST`).
#[inline(always)]
fn file_op(op: u32) -> bool {
    (tracer_common::op::FILE_FIRST..=tracer_common::op::FILE_LAST).contains(&op)
}

/// Whether a call of a sampled row goes uncounted: for a library row an
/// off phase of the duty cycle (its links may still be closing: nothing
/// they see counts) or a link of an earlier on phase that still waits to
/// be closed (the current one counts); for a file syscall, whose
/// tracepoints stay attached, an off phase only, and not a trap to count.
#[inline(always)]
fn sampled_off(op: u32, generation: u32) -> bool {
    if op < tracer_common::op::USER_BASE {
        return CONTROL.get(control::SAMPLE_OFF).is_some_and(|v| *v != 0);
    }
    match sample_skip(generation) {
        Some(c) => {
            count(c);
            true
        }
        None => false,
    }
}

/// Records a call's return: latency slot always, an event unless the op is
/// aggregate-only.
#[inline(always)]
pub fn on_return(op: u32, ret: i64) -> Result<u32, Skip> {
    on_return_at(op, 0, ret)
}

/// `on_return` for a uprobe's return, whose link belongs to on phase
/// `generation` of the sampled rows (`on_entry_at`).
#[inline(always)]
pub fn on_return_at(op: u32, generation: u32, ret: i64) -> Result<u32, Skip> {
    if stopped() {
        return Err(Skip::Stopped);
    }
    if op >= MAX_OPS {
        return Err(Skip::BadOp);
    }
    let config = OP_CONFIG.get(op).copied().unwrap_or_default();
    // The return of a sampled call in an off phase (its entry returned at
    // once), or on a link of an earlier on phase: neither recorded nor a
    // return without an entry.
    if config.flags & op_flags::SAMPLED != 0 && sampled_off(op, generation) {
        return Err(Skip::SampleOff);
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let key = InflightKey { pid_tgid, op, _pad: 0 };
    // The slot stays for the thread's next call; `start_ns == 0` marks it
    // consumed. SAFETY: only this thread writes its own slot.
    let entry = match INFLIGHT.get_ptr_mut(key) {
        Some(slot) if unsafe { (*slot).start_ns } != 0 => unsafe {
            let v = *slot;
            (*slot).start_ns = 0;
            v
        },
        // A set-up call that entered after its link was switched off
        // returns without an entry by design.
        _ => {
            // A sampled file syscall entered in an off phase returns in an
            // on phase with no entry: skipped on purpose, not lost.
            let skipped = config.flags & op_flags::SAMPLED != 0 && file_op(op);
            if !skipped && traced((pid_tgid >> 32) as u32) && !(config.flags & op_flags::SETUP != 0 && setup_off()) {
                count(counter::RETURN_WITHOUT_ENTRY);
            }
            return Err(Skip::NoEntry);
        }
    };
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let dur_ns = now.saturating_sub(entry.start_ns);
    let index = op * MAX_SLOTS + log2_slot(dur_ns);
    if let Some(p) = LATENCY.get_ptr_mut(index) {
        // SAFETY: per-CPU slot.
        unsafe { *p += 1 };
    }
    // A failed call of a row that asks for it is evented below, so its
    // error is counted; every other aggregate-only call is summed.
    if config.flags & op_flags::AGGREGATE_ONLY != 0 && !(config.flags & op_flags::FAIL_EVENTS != 0 && ret < 0) {
        aggregate(op, pid_tgid, &config, &entry.args, ret);
        return Ok(0);
    }
    if config.flags & op_flags::COPY_ROWS != 0 && ret == 0 && copy_row(op, pid_tgid, &config, &entry, dur_ns) {
        return Ok(0);
    }
    let mut args = entry.args;
    if config.deref_args != 0 {
        let mut i = 0;
        while i < MAX_ARGS {
            if config.deref_args & (1 << i) != 0 && args[i] != 0 {
                // SAFETY: reads user memory through the checked helper.
                args[i] = unsafe { bpf_probe_read_user(args[i] as *const u64) }.unwrap_or(0);
            }
            i += 1;
        }
    }
    if config.ret_read_offset != u32::MAX {
        // The pointee of an argument as the entry saw it, or of the result.
        let mut base = ret as u64;
        let mut i = 0;
        while i < MAX_ARGS {
            if i == config.read_arg as usize {
                base = entry.args[i];
            }
            i += 1;
        }
        if base != 0 {
            let at = base.wrapping_add(config.ret_read_offset as u64);
            // SAFETY: as above.
            args[MAX_ARGS - 1] = unsafe { bpf_probe_read_user(at as *const u64) }.unwrap_or(0);
        }
    }
    emit(kind::CALL, op, pid_tgid, entry.start_ns, dur_ns, args, ret, false);
    if config.flags & op_flags::REGION != 0 {
        next_epoch((pid_tgid >> 32) as u32);
    }
    Ok(0)
}

/// Sums a successful copy into its row; the call that creates the row is
/// evented (`kind::ROW_FIRST`, the handle in `ret`). False when the table
/// is full: the caller events the call as a `CALL`.
#[inline(always)]
fn copy_row(op: u32, pid_tgid: u64, config: &OpConfig, entry: &Inflight, dur_ns: u64) -> bool {
    let tgid = (pid_tgid >> 32) as u32;
    // SAFETY: read-only lookup of a plain value.
    let epoch = unsafe { COPY_EPOCH.get(tgid) }.copied().unwrap_or(0);
    let generation = CONTROL.get(control::COPY_GEN).copied().unwrap_or(0);
    let handle = copy_row_handle(op, config.key_args, &entry.args, copy_row_tag(epoch, generation));
    let key = AggKey { tgid, op, handle };
    let i = config.count_arg as usize;
    let bytes = if i < MAX_ARGS { entry.args[i] } else { 0 };
    match COPY_ROWS.get_ptr_mut(key) {
        Some(v) => add_copy(v, bytes),
        // BPF_NOEXIST: of two threads making the row at once, one inserts
        // it and events its first call, the other adds to it.
        None => match COPY_ROWS.insert(key, AggValue { calls: 1, bytes }, BPF_NOEXIST as u64) {
            Ok(()) => emit(
                kind::ROW_FIRST,
                op,
                pid_tgid,
                entry.start_ns,
                dur_ns,
                entry.args,
                handle as i64,
                false,
            ),
            Err(e) if e == -EEXIST => {
                if let Some(v) = COPY_ROWS.get_ptr_mut(key) {
                    add_copy(v, bytes);
                }
            }
            Err(_) => {
                count(counter::COPY_ROWS_FULL);
                return false;
            }
        },
    }
    true
}

/// `-EEXIST`: an insert with `BPF_NOEXIST` found the key there.
const EEXIST: i32 = 17;

/// Adds one copy to a row. Atomic: threads on other CPUs may add to the
/// same row. (The BPF target has no compare-and-swap, so `AtomicU64` has
/// no `fetch_add`; the intrinsic is the instruction, `lock xadd`.)
#[inline(always)]
fn add_copy(v: *mut AggValue, bytes: u64) {
    use core::intrinsics::{AtomicOrdering::Relaxed, atomic_xadd};
    // SAFETY: a value of `COPY_ROWS`, which lives as long as its row; user
    // space deletes a row only once no call can reach it (its tag is old).
    unsafe {
        atomic_xadd::<u64, u64, { Relaxed }>(core::ptr::addr_of_mut!((*v).calls), 1);
        atomic_xadd::<u64, u64, { Relaxed }>(core::ptr::addr_of_mut!((*v).bytes), bytes);
    }
}

/// Moves the process's region epoch on: every copy row starts anew.
#[inline(always)]
fn next_epoch(tgid: u32) {
    match COPY_EPOCH.get_ptr_mut(tgid) {
        // SAFETY: a lost increment between two threads still moves the
        // epoch on, which is all a copy row needs.
        Some(p) => unsafe { *p += 1 },
        None => {
            let _ = COPY_EPOCH.insert(tgid, 1, 0);
        }
    }
}

/// Hashes the call's `ncclUniqueId` (by value on the stack, or behind an
/// argument) into `args[nccl_id::HASH_ARG]` and
/// `args[nccl_id::LEGACY_HASH_ARG]`, both 0 (and a read error counted) when
/// it cannot be read. The id is only readable here: NCCL copies it and the
/// caller's stack moves on before the return.
#[inline(always)]
fn hash_unique_id(config: &OpConfig, args: &mut [u64; MAX_ARGS], sp: u64) {
    let mut at = 0u64;
    if config.id_src == nccl_id::ON_STACK {
        if sp != 0 {
            at = sp + 8;
        }
    } else {
        let mut i = 0;
        while i < MAX_ARGS {
            if i == config.id_src as usize {
                at = args[i];
            }
            i += 1;
        }
    }
    // SAFETY: reads user memory through the checked helper.
    let words = if at == 0 {
        None
    } else {
        unsafe { bpf_probe_read_user(at as *const [u64; nccl_id::WORDS]) }.ok()
    };
    match words {
        Some(w) => {
            args[nccl_id::HASH_ARG] = nccl_id::hash(&w);
            args[nccl_id::LEGACY_HASH_ARG] = nccl_id::hash_legacy(&w);
        }
        None => {
            count(counter::READ_ERRORS);
            args[nccl_id::HASH_ARG] = 0;
            args[nccl_id::LEGACY_HASH_ARG] = 0;
        }
    }
}

/// Keeps the thread's current context; an event only when it changed.
#[inline(always)]
fn track_ctx(op: u32, pid_tgid: u64, args: [u64; MAX_ARGS]) {
    let tid = pid_tgid as u32;
    let ctx = args[0];
    // SAFETY: read-only lookup of a plain value.
    if unsafe { CUR_CTX.get(tid) }.is_some_and(|v| *v == ctx) {
        return;
    }
    let _ = CUR_CTX.insert(tid, ctx, 0);
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    emit(kind::ENTRY, op, pid_tgid, now, 0, args, 0, false);
}

const _: () = assert!(MAX_ARGS <= 8);

/// Adds one call (and its bytes) to the per-(process, op, communicator) row;
/// the call that creates a row is evented when the op asks for a sample.
#[inline(always)]
fn aggregate(op: u32, pid_tgid: u64, config: &OpConfig, args: &[u64; MAX_ARGS], ret: i64) {
    // Eight slots read by a masked index: a bound the verifier keeps on
    // every kernel (6.1 lost `i < MAX_ARGS` across a spill of `i`). The
    // slots past MAX_ARGS are 0, as is NO_ARG's (0xff & 7).
    let mut slots = [0u64; 8];
    slots[..MAX_ARGS].copy_from_slice(args);
    let arg = |i: u8| slots[(i & 7) as usize];
    let key = AggKey {
        tgid: (pid_tgid >> 32) as u32,
        op,
        handle: arg(config.handle_arg),
    };
    if config.flags & op_flags::SOCK_OWNER != 0 {
        own_socket(key.handle, key.tgid);
    }
    let bytes = if config.flags & op_flags::BYTES_FROM_RET != 0 {
        if ret > 0 { ret as u64 } else { 0 }
    } else if config.flags & op_flags::COUNT_DEREF != 0 {
        let at = arg(config.count_arg);
        // SAFETY: reads user memory through the checked helper.
        if at == 0 {
            0
        } else {
            unsafe { bpf_probe_read_user(at as *const u64) }.unwrap_or(0)
        }
    } else {
        arg(config.count_arg).wrapping_mul(nccl_dtype_size(arg(config.dtype_arg)))
    };
    match AGGREGATE.get_ptr_mut(key) {
        // SAFETY: per-CPU value, no concurrent writer on this CPU.
        Some(v) => unsafe {
            (*v).calls += 1;
            (*v).bytes += bytes;
        },
        None => {
            if AGGREGATE.insert(key, AggValue { calls: 1, bytes }, 0).is_err() {
                count(counter::AGGREGATE_FULL);
            } else if config.flags & op_flags::SAMPLE_FIRST != 0 {
                // The row's first call: one record of its arguments.
                // SAFETY: helper without preconditions.
                let now = unsafe { bpf_ktime_get_ns() };
                emit(kind::ENTRY, op, pid_tgid, now, 0, *args, ret, false);
            }
        }
    }
}

/// Makes `tgid` the owner of socket `sock`; a lookup only, once it is.
#[inline(always)]
fn own_socket(sock: u64, tgid: u32) {
    // SAFETY: read-only lookup of a plain value.
    if sock == 0 || unsafe { SOCK_OWNER.get(sock) }.is_some_and(|t| *t == tgid) {
        return;
    }
    let _ = SOCK_OWNER.insert(sock, tgid, 0);
}

const TASK_COMM_LEN: u32 = 16;

/// Writes one record to the ring buffer, counting a failed reservation. The
/// reader is woken only when the buffer holds `WAKEUP_AT` bytes (or `wake`:
/// records user space must act on soon); otherwise its tick drains it.
#[expect(clippy::too_many_arguments, reason = "the record's fields, written once")]
#[inline(always)]
pub fn emit(
    kind: u32,
    op: u32,
    pid_tgid: u64,
    start_ns: u64,
    dur_ns: u64,
    args: [u64; MAX_ARGS],
    ret: i64,
    wake: bool,
) {
    match EVENTS.reserve::<Event>(0) {
        Some(mut slot) => {
            let e = slot.as_mut_ptr();
            // SAFETY: `e` is the reserved record; every field is written
            // before the submit. The comm, where the kind carries one, goes
            // straight into the record (the helper writes all 16 bytes,
            // zero-padded, or zeroes them on failure), saving the zeroed
            // stack copy aya's wrapper makes.
            unsafe {
                (*e).kind = kind;
                (*e).op = op;
                (*e).pid = (pid_tgid >> 32) as u32;
                (*e).tid = pid_tgid as u32;
                (*e).start_ns = start_ns;
                (*e).dur_ns = dur_ns;
                (*e).args = args;
                (*e).ret = ret;
                let comm = core::ptr::addr_of_mut!((*e).comm);
                if has_comm(kind) {
                    generated::bpf_get_current_comm(comm.cast(), TASK_COMM_LEN);
                } else {
                    // Volatile: plain zero stores become a call to the
                    // byte-loop `memset` subprogram.
                    let words = comm.cast::<u64>();
                    words.write_volatile(0);
                    words.add(1).write_volatile(0);
                }
            }
            let flags = if wake || EVENTS.query(BPF_RB_AVAIL_DATA as u64) >= WAKEUP_AT.load() as u64 {
                BPF_RB_FORCE_WAKEUP
            } else {
                BPF_RB_NO_WAKEUP
            };
            slot.submit(flags as u64);
        }
        None => count(counter::RINGBUF_DROPS),
    }
}
