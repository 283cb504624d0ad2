//! PCI facts from sysfs: the bridges above a device, its NUMA node, link
//! state, IOMMU group, the ACS control of bridges, and the path class between
//! two devices (the `nvidia-smi topo -m` / NCCL legend).
//!
//! `/sys/bus/pci/devices/<bdf>` is a symlink into `/sys/devices/pciDDDD:BB/`
//! (the host bridge, i.e. root complex) followed by one directory per PCI
//! bridge on the way down (root port, switch upstream port, switch downstream
//! port, ...) and finally the device:
//! <https://www.kernel.org/doc/html/latest/PCI/sysfs-pci.html>.
use std::{
    fs,
    path::{Path, PathBuf},
};

use serde::Serialize;

/// How far apart two PCI devices are, nearest first. Same definitions as the
/// `nvidia-smi topo -m` legend and NCCL's `PATH_*` (`src/graph/topo.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum PathClass {
    /// At most one PCIe switch (bridge) between them.
    Pix,
    /// Several PCIe switches, without crossing the host bridge.
    Pxb,
    /// Through the PCIe host bridge (the CPU's root complex).
    Phb,
    /// Between two host bridges of one NUMA node.
    Node,
    /// Across the inter-socket (SMP) interconnect.
    Sys,
}

impl PathClass {
    pub fn as_str(self) -> &'static str {
        match self {
            PathClass::Pix => "PIX",
            PathClass::Pxb => "PXB",
            PathClass::Phb => "PHB",
            PathClass::Node => "NODE",
            PathClass::Sys => "SYS",
        }
    }
}

/// Where a device sits in the PCI tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The host bridge directory, e.g. `pci0000:00`.
    pub host_bridge: String,
    /// Bus addresses from the root port down to the device, inclusive.
    pub chain: Vec<String>,
}

/// PCIe link state from sysfs (`current_link_speed`, ...).
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct PcieLink {
    /// As sysfs prints it, e.g. `16.0 GT/s PCIe`.
    pub current_speed: Option<String>,
    pub max_speed: Option<String>,
    pub current_width: Option<u32>,
    pub max_width: Option<u32>,
    /// Why the link runs below its maximum, when it does.
    pub downtrained: Option<String>,
}

/// One PCI device (GPU or NIC) as sysfs describes it.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct PciDevice {
    pub bdf: String,
    /// `numa_node` (absent when the kernel reports -1: no NUMA affinity).
    pub numa_node: Option<u32>,
    pub host_bridge: String,
    /// Bridges above the device, root port first.
    pub bridges: Vec<String>,
    pub link: Option<PcieLink>,
    pub iommu_group: Option<String>,
    /// `/sys/kernel/iommu_groups/N/type`: `identity`, `DMA`, `DMA-FQ`, ...
    pub iommu_type: Option<String>,
    pub driver: Option<String>,
    #[serde(skip)]
    pub location: Option<Location>,
}

/// A bridge on a GPU/NIC path and its ACS control register.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct Bridge {
    pub bdf: String,
    /// The ACS extended capability, when the bridge has one.
    pub acs: Option<AcsCtl>,
    /// Why ACS could not be read (config space too short, ...).
    pub acs_error: Option<String>,
    pub link: Option<PcieLink>,
}

/// ACS Capability and Control registers (PCIe base spec, ACS Extended
/// Capability, ID 0x000D), decoded with `lspci -vvv`'s names.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct AcsCtl {
    pub capability: u16,
    pub control: u16,
    /// Control bits that are set, by `lspci` name (SrcValid, ReqRedir, ...).
    #[serde(deserialize_with = "crate::intern::vec")]
    pub enabled: Vec<crate::intern::Name>,
    /// Whether peer-to-peer requests or completions are redirected upstream
    /// (ReqRedir or CmpltRedir set): P2P through this bridge then goes via
    /// the root complex (and the IOMMU), or fails.
    pub redirects_p2p: bool,
}

/// `lspci`'s names for the ACS control bits 0..6 (`ls-ecaps.c`); ReqRedir is
/// "P2P Request Redirect", CmpltRedir "P2P Completion Redirect".
pub const ACS_BITS: [&str; 7] = [
    "SrcValid",
    "TransBlk",
    "ReqRedir",
    "CmpltRedir",
    "UpstreamFwd",
    "EgressCtrl",
    "DirectTrans",
];

const ACS_CAP_ID: u32 = 0x000D;
const EXT_CAP_START: usize = 0x100;

impl AcsCtl {
    pub fn decode(capability: u16, control: u16) -> Self {
        let enabled = ACS_BITS
            .iter()
            .enumerate()
            .filter(|(i, _)| control & (1 << i) != 0)
            .map(|(_, n)| *n)
            .collect();
        AcsCtl {
            capability,
            control,
            enabled,
            redirects_p2p: control & 0b1100 != 0,
        }
    }

    /// `SrcValid+ TransBlk- ReqRedir+ ...`, as `lspci -vvv` prints `ACSCtl:`.
    pub fn lspci(&self) -> String {
        ACS_BITS
            .iter()
            .enumerate()
            .map(|(i, n)| format!("{n}{}", if self.control & (1 << i) != 0 { '+' } else { '-' }))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes([*b.get(off)?, *b.get(off + 1)?]))
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes([
        *b.get(off)?,
        *b.get(off + 1)?,
        *b.get(off + 2)?,
        *b.get(off + 3)?,
    ]))
}

/// Finds the ACS capability in a PCI configuration space image (the sysfs
/// `config` file). `Ok(None)`: no ACS capability (also a conventional
/// 256-byte space, which has no extended capabilities); `Err`: only the
/// header was readable, as for a reader without CAP_SYS_ADMIN, who gets the
/// first 64 bytes (128 for CardBus): `pci_read_config` in
/// `drivers/pci/pci-sysfs.c`.
pub fn acs_from_config(config: &[u8]) -> Result<Option<AcsCtl>, String> {
    if config.len() <= 128 {
        return Err(format!(
            "only {} bytes of configuration space readable (needs root)",
            config.len()
        ));
    }
    if config.len() < EXT_CAP_START + 4 {
        return Ok(None);
    }
    let mut off = EXT_CAP_START;
    // Each header is ID [15:0], version [19:16], next offset [31:20]; the
    // bound stops a malformed (looping) list.
    for _ in 0..(4096 / 4) {
        let Some(header) = u32_at(config, off) else { break };
        if header == 0 || header == u32::MAX {
            break;
        }
        if header & 0xffff == ACS_CAP_ID {
            let (Some(cap), Some(ctl)) = (u16_at(config, off + 4), u16_at(config, off + 6)) else {
                return Err("ACS capability truncated".into());
            };
            return Ok(Some(AcsCtl::decode(cap, ctl)));
        }
        let next = ((header >> 20) & 0xffc) as usize;
        if next < EXT_CAP_START {
            break;
        }
        off = next;
    }
    Ok(None)
}

/// Whether `s` is a PCI address `dddd:bb:dd.f`.
pub fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && s.chars()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

/// `00000000:06:00.0` (NVML) or `0000:06:00.0` → `0000:06:00.0`.
pub fn normalize_bdf(s: &str) -> String {
    let s = s.trim().to_ascii_lowercase();
    match s.split_once(':') {
        Some((dom, rest)) => match u32::from_str_radix(dom, 16) {
            Ok(d) => format!("{d:04x}:{rest}"),
            Err(_) => s,
        },
        None => s,
    }
}

/// Parses a canonical sysfs device path into its host bridge and chain.
pub fn location_of(canonical: &Path) -> Option<Location> {
    let mut host_bridge = None;
    let mut chain = Vec::new();
    for c in canonical.components() {
        let c = c.as_os_str().to_string_lossy();
        if host_bridge.is_none() {
            if c.starts_with("pci") && c.contains(':') {
                host_bridge = Some(c.into_owned());
            }
        } else if is_bdf(&c) {
            chain.push(c.into_owned());
        } else {
            break;
        }
    }
    Some(Location {
        host_bridge: host_bridge?,
        chain,
    })
    .filter(|l| !l.chain.is_empty())
}

/// The class of the path between two devices, and the bridges on it.
pub fn classify(a: &Location, numa_a: Option<u32>, b: &Location, numa_b: Option<u32>) -> (PathClass, Vec<String>) {
    let inner = |l: &Location| l.chain[..l.chain.len() - 1].to_vec();
    if a.host_bridge != b.host_bridge {
        let mut bridges = inner(a);
        bridges.extend(inner(b));
        // numa_node -1 on both (no NUMA information) counts as one node.
        let class = if numa_a == numa_b {
            PathClass::Node
        } else {
            PathClass::Sys
        };
        return (class, bridges);
    }
    let common = a.chain.iter().zip(&b.chain).take_while(|(x, y)| x == y).count();
    if common == 0 {
        let mut bridges = inner(a);
        bridges.extend(inner(b));
        return (PathClass::Phb, bridges);
    }
    // From the deepest common bridge (a switch's upstream port) down; each
    // side crosses at most one more bridge (a downstream port) for PIX.
    let below = |l: &Location| l.chain.len().saturating_sub(common);
    let mut bridges = vec![a.chain[common - 1].clone()];
    for l in [a, b] {
        let end = l.chain.len().saturating_sub(1);
        if common < end {
            bridges.extend(l.chain[common..end].iter().cloned());
        }
    }
    bridges.dedup();
    let class = if below(a) <= 2 && below(b) <= 2 {
        PathClass::Pix
    } else {
        PathClass::Pxb
    };
    (class, bridges)
}

fn read_trim(p: &Path) -> Option<String> {
    fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn speed_gts(s: &str) -> Option<f64> {
    s.split_whitespace().next()?.parse().ok()
}

/// Reads the link attributes of a sysfs PCI device directory.
pub fn link_state(dir: &Path) -> Option<PcieLink> {
    let current_speed = read_trim(&dir.join("current_link_speed"));
    let max_speed = read_trim(&dir.join("max_link_speed"));
    let width = |f: &str| {
        read_trim(&dir.join(f))
            .and_then(|w| w.parse::<u32>().ok())
            .filter(|w| *w > 0)
    };
    let (current_width, max_width) = (width("current_link_width"), width("max_link_width"));
    if current_speed.is_none() && max_speed.is_none() && current_width.is_none() && max_width.is_none() {
        return None;
    }
    let mut why = Vec::new();
    if let (Some(c), Some(m)) = (current_width, max_width)
        && c < m
    {
        why.push(format!("width x{c} of x{m}"));
    }
    if let (Some(c), Some(m)) = (
        current_speed.as_deref().and_then(speed_gts),
        max_speed.as_deref().and_then(speed_gts),
    ) && c < m
    {
        why.push(format!("speed {c:.1} of {m:.1} GT/s"));
    }
    Some(PcieLink {
        current_speed,
        max_speed,
        current_width,
        max_width,
        downtrained: (!why.is_empty()).then(|| why.join(", ")),
    })
}

fn link_name(p: &Path) -> Option<String> {
    fs::read_link(p)
        .ok()
        .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
}

/// The sysfs directory of a PCI device under `root` (`/` on a real host).
pub fn device_dir(root: &Path, bdf: &str) -> PathBuf {
    root.join("sys/bus/pci/devices").join(bdf)
}

/// Everything sysfs says about the device `bdf`; None when it is not there.
pub fn device(root: &Path, bdf: &str) -> Option<PciDevice> {
    let dir = device_dir(root, bdf);
    let canonical = fs::canonicalize(&dir).ok()?;
    let location = location_of(&canonical)?;
    let numa_node = read_trim(&dir.join("numa_node"))
        .and_then(|n| n.parse::<i64>().ok())
        .and_then(|n| u32::try_from(n).ok());
    let iommu_group = link_name(&dir.join("iommu_group"));
    let iommu_type = iommu_group
        .as_ref()
        .and_then(|g| read_trim(&root.join("sys/kernel/iommu_groups").join(g).join("type")));
    Some(PciDevice {
        bdf: bdf.to_string(),
        numa_node,
        host_bridge: location.host_bridge.clone(),
        bridges: location.chain[..location.chain.len() - 1].to_vec(),
        link: link_state(&dir),
        iommu_group,
        iommu_type,
        driver: link_name(&dir.join("driver")),
        location: Some(location),
    })
}

/// A bridge's ACS state and link, read from its `config` file.
pub fn bridge(root: &Path, bdf: &str) -> Bridge {
    let dir = device_dir(root, bdf);
    let (acs, acs_error) = match fs::read(dir.join("config")) {
        Ok(cfg) => match acs_from_config(&cfg) {
            Ok(a) => (a, None),
            Err(e) => (None, Some(e)),
        },
        Err(e) => (None, Some(format!("reading config: {e}"))),
    };
    Bridge {
        bdf: bdf.to_string(),
        acs,
        acs_error,
        link: link_state(&dir),
    }
}

/// NVIDIA display/3D controllers sysfs lists, driver or not (vendor 0x10de,
/// class 0x03xxxx).
pub fn nvidia_functions(root: &Path) -> Vec<String> {
    let Ok(dir) = fs::read_dir(root.join("sys/bus/pci/devices")) else {
        return Vec::new();
    };
    let mut out: Vec<String> = dir
        .flatten()
        .filter(|e| {
            let p = e.path();
            read_trim(&p.join("vendor")).as_deref() == Some("0x10de")
                && read_trim(&p.join("class")).is_some_and(|c| c.starts_with("0x03"))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}
