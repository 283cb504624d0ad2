//! Syscall tracepoints: the pinning entry points that exist on every kernel,
//! kprobes or not, the socket data syscalls that carry NCCL's socket
//! transport (and any other host-staged socket traffic), and the file I/O
//! and ioctls that tell cuFile's compat mode from nvidia-fs.
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
use core::mem::offset_of;

use aya_ebpf::{
    helpers::bpf_probe_read_kernel,
    macros::{btf_tracepoint, raw_tracepoint, tracepoint},
    programs::{BtfTracePointContext, RawTracePointContext, TracePointContext},
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

/// `orig_ax`, `ip` and `cs` of `struct pt_regs`: all `sys_exit` needs to
/// filter, read on every syscall of the machine (24 bytes, not the 88 of
/// `Regs`).
#[repr(C)]
#[derive(Clone, Copy)]
struct ExitRegs {
    orig_ax: u64,
    _ip: u64,
    cs: u64,
}
const EXIT_REGS_AT: usize = REGS_AT + 64;
const _: () = assert!(offset_of!(Regs, orig_ax) == EXIT_REGS_AT - REGS_AT);

#[inline(always)]
fn regs(ptr: u64) -> Option<Regs> {
    // SAFETY: a kernel pointer passed by the tracepoint, read with the checked helper.
    unsafe { bpf_probe_read_kernel((ptr as usize + REGS_AT) as *const Regs) }.ok()
}

/// What both `sys_enter` programs do once they have the arguments and `cs`.
#[inline(always)]
fn enter(op: u32, args: [u64; 6], cs: u64) -> i32 {
    if cs != USER_CS {
        return 0;
    }
    match on_entry(op, args) {
        Ok(v) => v as i32,
        Err(e) => e.code() as i32,
    }
}

/// What both `sys_exit` programs do once they have `orig_ax` and `cs`.
#[inline(always)]
fn exit(nr: u64, cs: u64, ret: i64) -> i32 {
    let Some(op) = syscall_op(nr) else { return 0 };
    if cs != USER_CS {
        return 0;
    }
    match on_return(op, ret) {
        Ok(v) => v as i32,
        Err(e) => e.code() as i32,
    }
}

/// Loads a `T` at byte `at` of a BTF-typed kernel pointer with plain loads
/// (the verifier checks them against the type and makes them fault-safe):
/// no helper call, unlike `bpf_probe_read_kernel`.
#[inline(always)]
unsafe fn load<T: Copy>(base: *const u8, at: usize) -> T {
    // SAFETY: the caller names an offset inside the pointee.
    unsafe { core::ptr::read_volatile(base.add(at).cast::<T>()) }
}

/// `sys_enter` as a BTF-typed tracepoint (`tp_btf`, 5.5+): the same
/// dispatch as `raw_sys_enter`, but the registers are read with plain loads
/// instead of a helper call per syscall. The planner prefers it and falls
/// back to the raw tracepoint where the kernel refuses it.
#[btf_tracepoint(function = "sys_enter")]
pub fn btf_sys_enter(ctx: BtfTracePointContext) -> i32 {
    let nr: u64 = ctx.arg(1);
    let Some(op) = syscall_op(nr) else { return 0 };
    let regs: *const u8 = ctx.arg(0);
    // SAFETY: offsets inside `struct pt_regs` (the fields of `Regs`).
    let field = |at: usize| unsafe { load::<u64>(regs, REGS_AT + at) };
    let args = [
        field(offset_of!(Regs, di)),
        field(offset_of!(Regs, si)),
        field(offset_of!(Regs, dx)),
        field(offset_of!(Regs, r10)),
        field(offset_of!(Regs, r8)),
        field(offset_of!(Regs, r9)),
    ];
    enter(op, args, field(offset_of!(Regs, cs)))
}

/// `sys_exit` as a BTF-typed tracepoint; see `btf_sys_enter`.
#[btf_tracepoint(function = "sys_exit")]
pub fn btf_sys_exit(ctx: BtfTracePointContext) -> i32 {
    let regs: *const u8 = ctx.arg(0);
    // SAFETY: offsets inside `struct pt_regs` (the fields of `ExitRegs`).
    let field = |at: usize| unsafe { load::<u64>(regs, EXIT_REGS_AT + at) };
    let (nr, cs) = (field(offset_of!(ExitRegs, orig_ax)), field(offset_of!(ExitRegs, cs)));
    exit(nr, cs, ctx.arg(1))
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
    enter(op, [r.di, r.si, r.dx, r.r10, r.r8, r.r9], r.cs)
}

/// The generic `sys_exit` raw tracepoint (`TP_PROTO(struct pt_regs *regs,
/// long ret)`): the number is `orig_ax`.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn raw_sys_exit(ctx: RawTracePointContext) -> i32 {
    let at = ctx.arg::<u64>(0) as usize + EXIT_REGS_AT;
    // SAFETY: a kernel pointer passed by the tracepoint, read with the checked helper.
    let Ok(r) = (unsafe { bpf_probe_read_kernel(at as *const ExitRegs) }) else {
        return 0;
    };
    exit(r.orig_ax, r.cs, ctx.arg::<i64>(1))
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

/// Syscalls summed per (process, fd), by each syscall's own tracepoints
/// where the shared dispatch cannot attach. Every one of them has the fd at
/// offset 16 of its `sys_enter_*` record and `long ret` at offset 16 of its
/// `sys_exit_*` record:
///
/// - socket data syscalls (`sendto`/`recvfrom`: fd, buff, len, flags,
///   addr, addr_len; `sendmsg`/`recvmsg`: fd, msg, flags): the kernel sums
///   calls and returned bytes per (process, op, fd);
/// - positional file I/O (`pread64`/`pwrite64`: fd, buf, count, pos;
///   `preadv`/`pwritev`(2): fd, vec, vlen, pos_l, pos_h[, flags]) and
///   `ioctl` (fd, cmd, arg), the same way, sampled with the duty cycle.
macro_rules! fd_pair {
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

fd_pair!(sys_enter_sendto, sys_exit_sendto, op::SENDTO);
fd_pair!(sys_enter_sendmsg, sys_exit_sendmsg, op::SENDMSG);
fd_pair!(sys_enter_recvfrom, sys_exit_recvfrom, op::RECVFROM);
fd_pair!(sys_enter_recvmsg, sys_exit_recvmsg, op::RECVMSG);
fd_pair!(sys_enter_pread64, sys_exit_pread64, op::PREAD64);
fd_pair!(sys_enter_pwrite64, sys_exit_pwrite64, op::PWRITE64);
fd_pair!(sys_enter_preadv, sys_exit_preadv, op::PREADV);
fd_pair!(sys_enter_pwritev, sys_exit_pwritev, op::PWRITEV);
fd_pair!(sys_enter_preadv2, sys_exit_preadv2, op::PREADV2);
fd_pair!(sys_enter_pwritev2, sys_exit_pwritev2, op::PWRITEV2);
fd_pair!(sys_enter_ioctl, sys_exit_ioctl, op::IOCTL);

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
