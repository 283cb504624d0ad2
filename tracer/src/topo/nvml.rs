//! What NVML (libnvidia-ml, loaded at run time by `nvml-wrapper`) adds:
//! model, UUID, BAR1 use, NVLink peers, PCIe replays, and the traffic
//! sampler. Without the library or the driver every entry point returns an
//! error or None at once, so the binary runs on machines without NVIDIA.
use std::{ffi::OsStr, sync::OnceLock};

use nvml_wrapper::{
    Device, Nvml,
    enum_wrappers::device::PcieUtilCounter,
    sys_exports::field_id::{NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX},
};
use nvml_wrapper_sys::bindings::{NVML_NVLINK_MAX_LINKS, nvmlFieldValue_t};
use serde::Serialize;

use super::pci::{PcieLink, normalize_bdf};

/// BAR1 (the GPU memory window the host and peers map) in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Bar1 {
    pub total: u64,
    pub used: u64,
    pub free: u64,
}

/// What NVML says about one GPU.
#[derive(Clone, Debug, Default)]
pub struct NvmlGpu {
    pub index: u32,
    pub bus: String,
    pub name: Option<String>,
    pub uuid: Option<String>,
    pub bar1: Option<Bar1>,
    /// Active NVLinks by remote PCI address (a GPU, or an NVSwitch).
    pub nvlink: Vec<(String, u32)>,
    pub pcie_replays: Option<u32>,
    /// Link generation and width as NVML reports them (used where sysfs
    /// has no link attributes).
    pub link: Option<PcieLink>,
}

/// GT/s per lane of a PCIe generation.
fn gen_speed(generation: u32) -> Option<String> {
    let gts = match generation {
        1 => 2.5,
        2 => 5.0,
        3 => 8.0,
        4 => 16.0,
        5 => 32.0,
        6 => 64.0,
        _ => return None,
    };
    Some(format!("{gts:.1} GT/s PCIe"))
}

fn nvml_link(d: &Device<'_>) -> Option<PcieLink> {
    let (cg, mg) = (d.current_pcie_link_gen().ok(), d.max_pcie_link_gen().ok());
    let (cw, mw) = (d.current_pcie_link_width().ok(), d.max_pcie_link_width().ok());
    if cg.is_none() && cw.is_none() {
        return None;
    }
    let mut why = Vec::new();
    if let (Some(c), Some(m)) = (cw, mw)
        && c < m
    {
        why.push(format!("width x{c} of x{m}"));
    }
    if let (Some(c), Some(m)) = (cg, mg)
        && c < m
    {
        why.push(format!("generation {c} of {m}"));
    }
    Some(PcieLink {
        current_speed: cg.and_then(gen_speed),
        max_speed: mg.and_then(gen_speed),
        current_width: cw.filter(|w| *w > 0),
        max_width: mw.filter(|w| *w > 0),
        downtrained: (!why.is_empty()).then(|| why.join(", ")),
    })
}

static NVML: OnceLock<Result<Nvml, String>> = OnceLock::new();

/// The process's NVML handle: `libnvidia-ml.so.1` (what the driver
/// installs), else `libnvidia-ml.so` (the development link).
pub fn handle() -> Result<&'static Nvml, String> {
    NVML.get_or_init(|| {
        // NVML talks to the driver through this node; without it, say so at
        // once instead of searching the library path for libnvidia-ml.
        if !std::path::Path::new("/dev/nvidiactl").exists() {
            return Err("NVML unavailable: /dev/nvidiactl does not exist (no NVIDIA driver)".into());
        }
        let mut last = String::new();
        for lib in ["libnvidia-ml.so.1", "libnvidia-ml.so"] {
            match Nvml::builder().lib_path(OsStr::new(lib)).init() {
                Ok(n) => return Ok(n),
                Err(e) => last = format!("NVML unavailable: {e}"),
            }
        }
        Err(last)
    })
    .as_ref()
    .map_err(Clone::clone)
}

fn one_line(e: impl std::fmt::Display) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

/// Every GPU NVML sees, in NVML index order (PCI bus order).
pub fn gpus() -> Result<Vec<NvmlGpu>, String> {
    let nvml = handle()?;
    let count = nvml
        .device_count()
        .map_err(|e| format!("NVML device count: {}", one_line(e)))?;
    let mut out = Vec::new();
    for index in 0..count {
        let d = match nvml.device_by_index(index) {
            Ok(d) => d,
            Err(e) => return Err(format!("NVML GPU {index}: {}", one_line(e))),
        };
        let Ok(pci) = d.pci_info() else { continue };
        let mut nvlink: Vec<(String, u32)> = Vec::new();
        for link in 0..NVML_NVLINK_MAX_LINKS {
            let l = d.link_wrapper_for(link);
            if !l.is_active().unwrap_or(false) {
                continue;
            }
            let peer = l
                .remote_pci_info()
                .map(|p| normalize_bdf(&p.bus_id))
                .unwrap_or_else(|_| "unknown".into());
            match nvlink.iter_mut().find(|(b, _)| *b == peer) {
                Some((_, n)) => *n += 1,
                None => nvlink.push((peer, 1)),
            }
        }
        out.push(NvmlGpu {
            index,
            bus: normalize_bdf(&pci.bus_id),
            name: d.name().ok(),
            uuid: d.uuid().ok(),
            bar1: d.bar1_memory_info().ok().map(|b| Bar1 {
                total: b.total,
                used: b.used,
                free: b.free,
            }),
            nvlink,
            pcie_replays: d.pcie_replay_counter().ok(),
            link: nvml_link(&d),
        });
    }
    Ok(out)
}

/// One sample of a GPU's interconnect traffic.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct GpuTraffic {
    /// NVML index (PCI bus order, as `Gpu::index`).
    pub index: usize,
    pub bus: String,
    /// Cumulative NVLink data bytes sent, summed over the links
    /// (`NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX`, KiB × 1024; payload only,
    /// no protocol overhead). Subtract two samples for the traffic between.
    pub nvlink_tx_bytes: Option<u64>,
    /// Cumulative NVLink data bytes received (`..._DATA_RX`).
    pub nvlink_rx_bytes: Option<u64>,
    /// PCIe throughput out of the GPU in KB/s, measured by the driver over
    /// about 20 ms during this call (`nvmlDeviceGetPcieThroughput`): a rate,
    /// not a counter.
    pub pcie_tx_kbps: Option<u32>,
    /// PCIe throughput into the GPU in KB/s (same sampling).
    pub pcie_rx_kbps: Option<u32>,
}

/// Samples every GPU's NVLink byte counters and PCIe throughput; None at once
/// when there is no NVIDIA driver (or no GPU). Each call takes about 40 ms
/// per GPU (the two PCIe rate samples); [`nvlink_traffic`] skips those.
pub fn gpu_traffic() -> Option<Vec<GpuTraffic>> {
    sample(true)
}

/// [`gpu_traffic`] without the PCIe rates (`pcie_*` are None): only the
/// cumulative NVLink counters, one NVML call per GPU, for frequent sampling.
pub fn nvlink_traffic() -> Option<Vec<GpuTraffic>> {
    sample(false)
}

fn sample(pcie: bool) -> Option<Vec<GpuTraffic>> {
    let nvml = handle().ok()?;
    let count = nvml.device_count().ok().filter(|c| *c > 0)?;
    let mut out = Vec::new();
    for index in 0..count {
        let Ok(d) = nvml.device_by_index(index) else { continue };
        let bus = d.pci_info().map(|p| normalize_bdf(&p.bus_id)).unwrap_or_default();
        let (tx, rx) = nvlink_data(nvml, &d);
        out.push(GpuTraffic {
            index: index as usize,
            bus,
            nvlink_tx_bytes: tx,
            nvlink_rx_bytes: rx,
            pcie_tx_kbps: pcie.then(|| d.pcie_throughput(PcieUtilCounter::Send).ok()).flatten(),
            pcie_rx_kbps: pcie.then(|| d.pcie_throughput(PcieUtilCounter::Receive).ok()).flatten(),
        });
    }
    Some(out)
}

/// NVLink data TX/RX bytes summed over links. The throughput fields are per
/// link, chosen by `scopeId`; `Device::field_values_for` in nvml-wrapper 0.13
/// leaves `scopeId` at 0 (link 0 only), so this calls
/// `nvmlDeviceGetFieldValues` itself with one entry per (field, link).
fn nvlink_data(nvml: &Nvml, d: &Device<'_>) -> (Option<u64>, Option<u64>) {
    let Ok(get) = nvml.lib().nvmlDeviceGetFieldValues.as_ref() else {
        return (None, None);
    };
    let fields = [
        NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
        NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
    ];
    let mut values: Vec<nvmlFieldValue_t> = Vec::new();
    for f in fields {
        for link in 0..NVML_NVLINK_MAX_LINKS {
            // SAFETY: nvmlFieldValue_t is a plain C struct (integers and a
            // union of numbers): all-zero is a valid value.
            let mut v: nvmlFieldValue_t = unsafe { std::mem::zeroed() };
            v.fieldId = f;
            v.scopeId = link;
            values.push(v);
        }
    }
    // SAFETY: the handle belongs to this NVML session and `values` holds
    // `len` initialized entries that NVML fills in place.
    let ret = unsafe { get(d.handle(), values.len() as i32, values.as_mut_ptr()) };
    if ret != 0 {
        return (None, None);
    }
    let sum = |field: u32| -> Option<u64> {
        let mut total = None;
        for v in values.iter().filter(|v| v.fieldId == field && v.nvmlReturn == 0) {
            // SAFETY: valueType says which union member NVML wrote.
            let n = unsafe {
                match v.valueType {
                    1 => u64::from(v.value.uiVal),
                    2 => v.value.ulVal,
                    3 => v.value.ullVal,
                    4 => v.value.sllVal.max(0) as u64,
                    _ => continue,
                }
            };
            total = Some(total.unwrap_or(0u64).saturating_add(n.saturating_mul(1024)));
        }
        total
    };
    (sum(fields[0]), sum(fields[1]))
}
