//! Syscall tracepoints: the pinning entry points that exist on every kernel,
//! kprobes or not, and the socket data syscalls that carry NCCL's socket
//! transport (and any other host-staged socket traffic).
//!
//! `io_uring_register(2)` with IORING_REGISTER_BUFFERS pins the buffers'
//! pages with `pin_user_pages` (io_uring/rsrc.c, `io_sqe_buffer_register`),
//! the same kernel path RDMA memory registration takes.
//!
//! ```c
//! SYSCALL_DEFINE4(io_uring_register, unsigned int, fd, unsigned int, opcode,
//!                 void __user *, arg, unsigned int, nr_args)
//! ```
//! Record layout (`syscalls/sys_enter_io_uring_register/format`, identical
//! on 6.1 and 6.18): fd @16, opcode @24, arg @32, nr_args @40; exit: ret @16.
use aya_ebpf::{
    helpers::bpf_probe_read_kernel,
    macros::{raw_tracepoint, tracepoint},
    programs::{RawTracePointContext, TracePointContext},
};
use tracer_common::{MAX_SYSCALLS, op};

use crate::{
    maps::{SYSCALL_OPS, count},
    probes::{on_entry, on_return},
};

/// `struct pt_regs` (x86_64, arch/x86/include/asm/ptrace.h) from `r10` at
/// byte 56 to `cs` at byte 136: the syscall arguments are di, si, dx, r10,
/// r8, r9; `orig_ax` holds the syscall number; `cs` tells a 64-bit caller
/// (`__USER_CS`, 0x33) from a 32-bit one, whose numbers mean other calls.
#[repr(C)]
#[derive(Clone, Copy)]
struct Regs {
    r10: u64,
    r9: u64,
    r8: u64,
    ax: u64,
    cx: u64,
    dx: u64,
    si: u64,
    di: u64,
    orig_ax: u64,
    ip: u64,
    cs: u64,
}
const REGS_AT: usize = 56;
const USER_CS: u64 = 0x33;

/// The op of a syscall number, if a catalog point asked for it.
#[inline(always)]
fn syscall_op(nr: u64) -> Option<u32> {
    if nr >= MAX_SYSCALLS as u64 {
        return None;
    }
    SYSCALL_OPS.get(nr as u32).copied().filter(|op| *op != 0)
}

#[inline(always)]
fn regs(ptr: u64) -> Option<Regs> {
    // SAFETY: a kernel pointer passed by the tracepoint, read with the checked helper.
    unsafe { bpf_probe_read_kernel((ptr as usize + REGS_AT) as *const Regs) }.ok()
}

/// The generic `sys_enter` raw tracepoint (`TP_PROTO(struct pt_regs *regs,
/// long id)`), dispatching on the syscall number through `SYSCALL_OPS`.
/// Cheaper per traced call than the per-syscall `syscalls:sys_enter_*`
/// events (no perf record is built), at the price of a lookup on every
/// syscall of the machine; the planner prefers it and falls back to those.
#[raw_tracepoint(tracepoint = "sys_enter")]
pub fn raw_sys_enter(ctx: RawTracePointContext) -> i32 {
    let nr: u64 = ctx.arg(1);
    let Some(op) = syscall_op(nr) else { return 0 };
    let Some(r) = regs(ctx.arg(0)) else {
        count(tracer_common::counter::READ_ERRORS);
        return 0;
    };
    if r.cs != USER_CS {
        return 0;
    }
    match on_entry(op, [r.di, r.si, r.dx, r.r10, r.r8, r.r9]) {
        Ok(v) => v as i32,
        Err(e) => e.code() as i32,
    }
}

/// The generic `sys_exit` raw tracepoint (`TP_PROTO(struct pt_regs *regs,
/// long ret)`): the number is `orig_ax`.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn raw_sys_exit(ctx: RawTracePointContext) -> i32 {
    let Some(r) = regs(ctx.arg(0)) else { return 0 };
    let Some(op) = syscall_op(r.orig_ax) else { return 0 };
    if r.cs != USER_CS {
        return 0;
    }
    match on_return(op, ctx.arg::<i64>(1)) {
        Ok(v) => v as i32,
        Err(e) => e.code() as i32,
    }
}

#[tracepoint]
pub fn sys_enter_io_uring_register(ctx: TracePointContext) -> u32 {
    // SAFETY: offsets from the tracepoint format above, all 8-byte fields.
    let read = |off| unsafe { ctx.read_at::<u64>(off) };
    match (read(16), read(24), read(32), read(40)) {
        (Ok(fd), Ok(opcode), Ok(arg), Ok(nr)) => match on_entry(op::IO_URING_REGISTER, [fd, opcode, arg, nr, 0, 0]) {
            Ok(v) => v,
            Err(e) => e.code(),
        },
        _ => {
            count(tracer_common::counter::READ_ERRORS);
            1
        }
    }
}

#[tracepoint]
pub fn sys_exit_io_uring_register(ctx: TracePointContext) -> u32 {
    // SAFETY: `long ret` at offset 16.
    let ret = unsafe { ctx.read_at::<i64>(16) }.unwrap_or(i64::MIN);
    match on_return(op::IO_URING_REGISTER, ret) {
        Ok(v) => v,
        Err(e) => e.code(),
    }
}

/// Socket data syscalls. Every one of them has the socket fd at offset 16
/// of its `sys_enter_*` record (`sendto`/`recvfrom`: fd, buff, len, flags,
/// addr, addr_len; `sendmsg`/`recvmsg`: fd, msg, flags) and `long ret` at
/// offset 16 of its `sys_exit_*` record. The ops are aggregate-only: the
/// kernel sums calls and returned bytes per (process, op, fd).
macro_rules! socket_pair {
    ($enter:ident, $exit:ident, $op:expr) => {
        #[tracepoint]
        pub fn $enter(ctx: TracePointContext) -> u32 {
            // SAFETY: `fd` at offset 16, as above.
            match unsafe { ctx.read_at::<u64>(16) } {
                Ok(fd) => match on_entry($op, [fd, 0, 0, 0, 0, 0]) {
                    Ok(v) => v,
                    Err(e) => e.code(),
                },
                Err(_) => {
                    count(tracer_common::counter::READ_ERRORS);
                    1
                }
            }
        }

        #[tracepoint]
        pub fn $exit(ctx: TracePointContext) -> u32 {
            // SAFETY: `long ret` at offset 16.
            let ret = unsafe { ctx.read_at::<i64>(16) }.unwrap_or(i64::MIN);
            match on_return($op, ret) {
                Ok(v) => v,
                Err(e) => e.code(),
            }
        }
    };
}

socket_pair!(sys_enter_sendto, sys_exit_sendto, op::SENDTO);
socket_pair!(sys_enter_sendmsg, sys_exit_sendmsg, op::SENDMSG);
socket_pair!(sys_enter_recvfrom, sys_exit_recvfrom, op::RECVFROM);
socket_pair!(sys_enter_recvmsg, sys_exit_recvmsg, op::RECVMSG);

/// The pipeline benchmark's event source (never in the catalog): one event
/// per `getppid(2)` of a traced process, through the same `emit` as every
/// probe, so the benchmark measures ring buffer, wake-ups and user space.
#[tracepoint]
pub fn bench_sys_enter_getppid(_ctx: TracePointContext) -> u32 {
    if crate::maps::stopped() {
        return 0;
    }
    let pid_tgid = aya_ebpf::helpers::bpf_get_current_pid_tgid();
    if !crate::probes::traced((pid_tgid >> 32) as u32) {
        return 0;
    }
    crate::probes::emit(
        tracer_common::kind::CALL,
        op::BENCH_GETPPID,
        pid_tgid,
        0,
        0,
        [0; 6],
        0,
        false,
    );
    0
}
