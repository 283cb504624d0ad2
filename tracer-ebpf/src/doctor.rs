//! Trivial programs `gdrtrace doctor` loads and attaches to learn which
//! program kinds this kernel actually accepts. They record nothing.
use aya_ebpf::{
    macros::{btf_tracepoint, fentry, fexit, kprobe, kretprobe, raw_tracepoint, tracepoint, uprobe, uretprobe},
    programs::{
        BtfTracePointContext, FEntryContext, FExitContext, ProbeContext, RawTracePointContext, RetProbeContext,
        TracePointContext,
    },
};

#[fentry]
pub fn doctor_fentry(_ctx: FEntryContext) -> u32 {
    0
}
#[fexit]
pub fn doctor_fexit(_ctx: FExitContext) -> u32 {
    0
}
#[kprobe]
pub fn doctor_kprobe(_ctx: ProbeContext) -> u32 {
    0
}
#[kretprobe]
pub fn doctor_kretprobe(_ctx: RetProbeContext) -> u32 {
    0
}
#[tracepoint]
pub fn doctor_tracepoint(_ctx: TracePointContext) -> u32 {
    0
}
#[raw_tracepoint]
pub fn doctor_raw_tp(_ctx: RawTracePointContext) -> i32 {
    0
}
#[btf_tracepoint(function = "sys_enter")]
pub fn doctor_tp_btf(_ctx: BtfTracePointContext) -> i32 {
    0
}
#[uprobe]
pub fn doctor_uprobe(_ctx: ProbeContext) -> u32 {
    0
}
#[uretprobe]
pub fn doctor_uretprobe(_ctx: RetProbeContext) -> u32 {
    0
}
#[uprobe(multi)]
pub fn doctor_uprobe_multi(_ctx: ProbeContext) -> u32 {
    0
}
