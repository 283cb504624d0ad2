//! Verdicts of copies: what backs each side (the registry's answer), and
//! whether a device-to-device or peer copy went directly or through host
//! memory.
use tracer_common::Event;

use super::Transport;
use crate::model::{Backing, Registry};

/// The verdict of a copy from what backs its source and destination.
pub fn copy_verdict(name: &str, src: Backing, dst: Backing) -> (Transport, String) {
    use Backing::*;
    let staged = |side: &str| {
        (
            Transport::HostStaged,
            format!(
                "{name}: {side} is pageable host memory (not from cuMemAllocHost/cuMemHostAlloc/cuMemHostRegister): the driver stages it through a pinned bounce buffer"
            ),
        )
    };
    match (src, dst) {
        (Gpu { .. }, Gpu { .. }) => (
            Transport::Unknown,
            format!("{name}: device to device; peer path not yet known"),
        ),
        (HostPinned, Gpu { .. }) | (Gpu { .. }, HostPinned) => (
            Transport::GpuHostDma,
            format!("{name}: DMA between GPU and pinned host memory"),
        ),
        (HostPreExisting, Gpu { .. }) | (Gpu { .. }, HostPreExisting) => (
            Transport::Unknown,
            format!(
                "{name}: the host side is memory mapped before tracing began: pageable (staged through the driver's bounce buffer) unless cuMemHostRegister pinned it before then, which /proc/PID/maps does not show"
            ),
        ),
        (Host | Unknown, Gpu { .. }) => staged("source"),
        (Gpu { .. }, Host | Unknown) => staged("destination"),
        _ => (
            Transport::Unknown,
            format!("{name}: neither side is a GPU allocation seen by the tracer"),
        ),
    }
}

/// What backs each side of a sized copy, (destination, source): the
/// registry's answer, where the API itself does not say the side is device
/// memory (`cuMemcpyHtoD`'s destination is, whatever was seen allocated).
pub fn copy_sides(e: &Event, name: &str, registry: &Registry) -> (Backing, Backing) {
    let (dst_dev, src_dev) = crate::model::copy_direction(name);
    let side = |addr: u64, device: Option<bool>| match registry.backing(e.pid, addr) {
        Backing::Gpu { device } => Backing::Gpu { device },
        _ if device == Some(true) => Backing::Gpu { device: -1 },
        b => b,
    };
    (side(e.args[0], dst_dev), side(e.args[1], src_dev))
}

/// A device-to-device copy between allocations of two devices (devices
/// known from the contexts current when they were allocated).
pub(super) fn cross_device_verdict(
    e: &Event,
    name: &str,
    src: i32,
    dst: i32,
    registry: &Registry,
) -> (Transport, String) {
    if registry.peer_devices_enabled(e.pid, src, dst) {
        let (t, link) = peer_link(registry);
        (
            t,
            format!(
                "{name} from device {src} to device {dst} after cuCtxEnablePeerAccess succeeded for that pair: direct peer DMA over {link}"
            ),
        )
    } else {
        (
            Transport::HostStaged,
            format!(
                "{name} from device {src} to device {dst} without cuCtxEnablePeerAccess for that pair earlier in the process: the driver stages the copy through host memory"
            ),
        )
    }
}

fn peer_link(registry: &Registry) -> (Transport, &'static str) {
    match registry.nvlink {
        Some(Some(false)) => (Transport::P2pPcie, "PCIe (no NVLink between the GPUs)"),
        Some(Some(true)) => (Transport::P2pNvlink, "NVLink"),
        _ => (Transport::P2pNvlink, "NVLink assumed (topology unknown)"),
    }
}

/// `cuMemcpyPeer*`: peer-to-peer when `cuCtxEnablePeerAccess` succeeded
/// earlier in the process for either context (over NVLink or PCIe as the
/// topology says); otherwise the driver stages the copy through host memory.
pub(super) fn peer_copy_verdict(e: &Event, name: &str, registry: &Registry) -> (Transport, String) {
    let (dctx, sctx) = (e.args[1], e.args[3]);
    if dctx == sctx {
        return (
            Transport::IpcSameDevice,
            format!(
                "{name}: source and destination in the same context {dctx:#x}: a copy within one device's memory, crossing no link"
            ),
        );
    }
    if let (Some(d), Some(s)) = (registry.device_of_ctx(e.pid, dctx), registry.device_of_ctx(e.pid, sctx))
        && d == s
    {
        return (
            Transport::IpcSameDevice,
            format!(
                "{name} from context {sctx:#x} to {dctx:#x}, both on device {d}: the copy stays in that GPU's memory and crosses no link"
            ),
        );
    }
    if registry.peer_enabled(e.pid, dctx, sctx) {
        let (t, link) = peer_link(registry);
        (
            t,
            format!(
                "{name} from context {sctx:#x} to {dctx:#x} after cuCtxEnablePeerAccess succeeded for that pair: direct peer DMA over {link}"
            ),
        )
    } else {
        (
            Transport::HostStaged,
            format!(
                "{name} from context {sctx:#x} to {dctx:#x} without cuCtxEnablePeerAccess for that pair earlier in the process: the driver stages the copy through host memory"
            ),
        )
    }
}
