//! Discovery for `gdrtrace serve`: a process that opens a GPU or RDMA
//! device node, or a libcuda/libnccl/libibverbs file (the dynamic loader
//! opens every library it maps, `dlopen` included), joins the target set
//! here, in the kernel, before its next instruction: nothing it does after
//! the open is missed, however late user space reads the record.
//!
//! The path is read at entry (the argument is only there) and, when its
//! page is not resident yet, again at exit, after the kernel copied it in:
//! the loader passes paths that point into its freshly mapped
//! `/etc/ld.so.cache`, and a tracing program cannot fault a page in. The
//! target is added at exit and only when the open succeeded (`ld.so` tries several
//! directories, and a CPU-only build probing for libcuda is not a GPU
//! process). A process already traced that opens a library (`dlopen` of
//! libnccl long after start) is reported too, so user space attaches a
//! copy it has not seen without rescanning every process on a timer.
//!
//! ```c
//! SYSCALL_DEFINE4(openat, int, dfd, const char __user *, filename, int, flags, umode_t, mode)
//! SYSCALL_DEFINE3(open, const char __user *, filename, int, flags, umode_t, mode)
//! ```
//! Record layout (`syscalls/sys_enter_openat/format`, the same on 6.1 and
//! 6.18): filename @24 (`open`: @16); exit: `long ret` @16.
use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, generated::bpf_probe_read_user_str},
    macros::{map, tracepoint},
    maps::{LruHashMap, PerCpuArray},
    programs::TracePointContext,
};
use tracer_common::{
    control, counter,
    discover::{self, MAX_PENDING, PATH_BYTES},
    kind, op,
};

use crate::{
    maps::{CONTROL, TARGETS, count, stopped},
    probes::{emit, traced},
};

/// An open in flight that discovery must look at again at exit.
#[repr(C)]
#[derive(Clone, Copy)]
struct Pending {
    /// `discover::*`, or `discover::NONE` with `filename` set: the path
    /// could not be read at entry.
    reason: u32,
    _pad: u32,
    filename: u64,
}

/// Key: thread id with an open in flight that matched, or whose path could
/// not be read yet. Value: what to do at exit. LRU: a thread killed inside
/// `open` ages out.
#[map]
static DISCOVERING: LruHashMap<u32, Pending> = LruHashMap::with_max_entries(MAX_PENDING, 0);

/// Index 0. Value: per-CPU scratch for the path (too large for the stack).
#[map]
static PATH: PerCpuArray<[u8; PATH_BYTES]> = PerCpuArray::with_max_entries(1, 0);

/// Reads the path at `filename` and matches it; None if it cannot be read.
#[inline(always)]
fn read_and_match(filename: u64) -> Option<u32> {
    let buf = PATH.get_ptr_mut(0)?;
    // SAFETY: the helper writes at most PATH_BYTES bytes, NUL-terminated,
    // into this CPU's scratch slot.
    let n = unsafe { bpf_probe_read_user_str(buf.cast(), PATH_BYTES as u32, filename as *const _) };
    if n <= 0 {
        return None;
    }
    // SAFETY: this CPU's slot, just written: `n` bytes with the NUL.
    Some(discover::match_path(unsafe { &*buf }, (n - 1) as usize))
}

/// Whether a match is news: any library (a target may map a new copy), a
/// device node only for a process not traced yet.
#[inline(always)]
fn news(reason: u32, tgid: u32) -> bool {
    match reason {
        discover::NONE => false,
        discover::DEV_NVIDIA | discover::DEV_INFINIBAND => !traced(tgid),
        _ => true,
    }
}

#[inline(always)]
fn enter(ctx: &TracePointContext, filename_at: usize) -> u32 {
    if stopped() {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    if CONTROL.get(control::AGENT_TGID).is_some_and(|a| *a == tgid as u64) {
        return 0;
    }
    // SAFETY: offset from the tracepoint format above (a user pointer).
    let Ok(filename) = (unsafe { ctx.read_at::<u64>(filename_at) }) else {
        count(counter::DISCOVER_READ_ERRORS);
        return 1;
    };
    let pending = match read_and_match(filename) {
        Some(reason) if news(reason, tgid) => Pending {
            reason,
            _pad: 0,
            filename: 0,
        },
        Some(_) => return 0,
        None => Pending {
            reason: discover::NONE,
            _pad: 0,
            filename,
        },
    };
    let _ = DISCOVERING.insert(pid_tgid as u32, pending, 0);
    0
}

#[inline(always)]
fn exit(ctx: &TracePointContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    // SAFETY: read-only lookup of a plain value, copied out.
    let Some(pending) = (unsafe { DISCOVERING.get(tid) }).copied() else {
        return 0;
    };
    let _ = DISCOVERING.remove(tid);
    if stopped() {
        return 0;
    }
    // SAFETY: `long ret` at offset 16.
    let ret = unsafe { ctx.read_at::<i64>(16) }.unwrap_or(-1);
    if ret < 0 {
        return 0;
    }
    let tgid = (pid_tgid >> 32) as u32;
    let reason = if pending.reason != discover::NONE {
        pending.reason
    } else {
        // The open succeeded, so the kernel read the path: it is resident.
        match read_and_match(pending.filename) {
            Some(r) if news(r, tgid) => r,
            Some(_) => return 0,
            None => {
                count(counter::DISCOVER_READ_ERRORS);
                return 1;
            }
        }
    };
    let known = traced(tgid);
    if !known && TARGETS.insert(tgid, 0, 0).is_err() {
        count(counter::TARGETS_FULL);
        return 1;
    }
    // args[2]: 1 when the process was a target already (a library opened).
    // Woken at once: user space attaches the process's libraries on it.
    let args = [reason as u64, ret as u64, known as u64, 0, 0, 0];
    emit(kind::DISCOVER, op::NONE, pid_tgid, 0, 0, args, 0, true);
    0
}

#[tracepoint]
pub fn sys_enter_openat(ctx: TracePointContext) -> u32 {
    enter(&ctx, 24)
}

#[tracepoint]
pub fn sys_exit_openat(ctx: TracePointContext) -> u32 {
    exit(&ctx)
}

/// `open(2)`: legacy, but x86_64 still has it and static binaries use it.
#[tracepoint]
pub fn sys_enter_open(ctx: TracePointContext) -> u32 {
    enter(&ctx, 16)
}

#[tracepoint]
pub fn sys_exit_open(ctx: TracePointContext) -> u32 {
    exit(&ctx)
}
