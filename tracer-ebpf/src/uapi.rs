//! The one generic uprobe/uretprobe pair for every library function in the
//! user-space probe table (libcuda, libibverbs, libnccl, ...). The function
//! is told apart by the attach cookie, which carries its op code (and, for
//! the sampled rows, the on phase its link belongs to); the table
//! in `tracer/src/probes/uapi.rs` says which registers matter.
//!
//! Each program exists twice with the same body: as `uprobe.multi` (one
//! `BPF_TRACE_UPROBE_MULTI` link holds every offset of a library file, with
//! a cookie per offset; kernels 6.6+) and as plain `uprobe` (one perf-event
//! link per offset, the fallback for older kernels). The planner loads the
//! pair this kernel supports.
use aya_ebpf::{
    EbpfContext as _,
    helpers::generated::bpf_get_attach_cookie,
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};

use crate::probes::{on_entry_at, on_return_at};

#[inline(always)]
fn entry(ctx: &ProbeContext) -> u32 {
    // SAFETY: the context pointer is the program's own.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    let (op, generation) = (cookie as u32, (cookie >> 32) as u32);
    let arg = |n| ctx.arg::<u64>(n).unwrap_or(0);
    let args = [arg(0), arg(1), arg(2), arg(3), arg(4), arg(5)];
    match on_entry_at::<true>(op, generation, args, stack_pointer(ctx)) {
        Ok(v) => v,
        Err(e) => e.code(),
    }
}

/// The stack pointer at the probed function's entry (x86-64: arguments
/// passed in memory start at +8, above the return address).
#[inline(always)]
fn stack_pointer(ctx: &ProbeContext) -> u64 {
    #[cfg(bpf_target_arch = "x86_64")]
    {
        // SAFETY: the context's registers, readable by the program.
        unsafe { (*ctx.regs).rsp }
    }
    #[cfg(not(bpf_target_arch = "x86_64"))]
    {
        let _ = ctx;
        0
    }
}

#[inline(always)]
fn ret(ctx: &RetProbeContext) -> u32 {
    // SAFETY: as above.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    match on_return_at(cookie as u32, (cookie >> 32) as u32, ctx.ret::<i64>()) {
        Ok(v) => v,
        Err(e) => e.code(),
    }
}

#[uprobe(multi)]
pub fn uapi_entry_multi(ctx: ProbeContext) -> u32 {
    entry(&ctx)
}

#[uretprobe(multi)]
pub fn uapi_return_multi(ctx: RetProbeContext) -> u32 {
    ret(&ctx)
}

#[uprobe]
pub fn uapi_entry(ctx: ProbeContext) -> u32 {
    entry(&ctx)
}

#[uretprobe]
pub fn uapi_return(ctx: RetProbeContext) -> u32 {
    ret(&ctx)
}
