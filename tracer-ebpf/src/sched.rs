//! Process lifecycle: keeps the target set in the kernel so children, new
//! ranks and respawned workers are followed without a user-space race.
use aya_ebpf::{helpers::bpf_get_current_pid_tgid, macros::tracepoint, programs::TracePointContext};
use tracer_common::{counter, filter, kind, op};

use crate::{
    maps::{FILTER_MODE, FORK_CHILD_PID_OFFSET, TARGETS, count, stopped},
    probes::{emit, traced},
};

/// `sched_process_fork(parent, child)`: current is the parent.
#[tracepoint]
pub fn sched_process_fork(ctx: TracePointContext) -> u32 {
    if stopped() {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let parent = (pid_tgid >> 32) as u32;
    if !traced(parent) {
        return 0;
    }
    let off = FORK_CHILD_PID_OFFSET.load() as usize;
    // SAFETY: offset read from this kernel's tracepoint format at load time.
    let Ok(child) = (unsafe { ctx.read_at::<i32>(off) }) else {
        count(counter::READ_ERRORS);
        return 1;
    };
    let child = child as u32;
    if FILTER_MODE.load() == filter::TARGETS && TARGETS.insert(child, parent, 0).is_err() {
        count(counter::TARGETS_FULL);
    }
    emit(
        kind::FORK,
        op::NONE,
        pid_tgid,
        0,
        0,
        [child as u64, 0, 0, 0, 0, 0],
        0,
        false,
    );
    0
}

/// `sched_process_exec`: a traced process replaced its image (its libraries
/// must be looked up again).
#[tracepoint]
pub fn sched_process_exec(_ctx: TracePointContext) -> u32 {
    if stopped() {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    if traced((pid_tgid >> 32) as u32) {
        // Woken at once: the new image's libraries are attached on it.
        emit(kind::EXEC, op::NONE, pid_tgid, 0, 0, [0; 6], 0, true);
    }
    0
}

/// `sched_process_exit`: current is exiting; the group leader's exit ends
/// the process (the tracepoint fires per thread).
#[tracepoint]
pub fn sched_process_exit(_ctx: TracePointContext) -> u32 {
    if stopped() {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    if tgid as u64 != pid_tgid & 0xffff_ffff {
        // A thread: drop it from the set if fork put it there.
        let tid = pid_tgid as u32;
        let _ = TARGETS.remove(tid);
        return 0;
    }
    if !traced(tgid) {
        return 0;
    }
    emit(kind::EXIT, op::NONE, pid_tgid, 0, 0, [0; 6], 0, false);
    if FILTER_MODE.load() == filter::TARGETS {
        let _ = TARGETS.remove(tgid);
    }
    0
}
