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
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};
use tracer_common::op;

use crate::{
    maps::count,
    probes::{on_entry, on_return},
};

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
