//! GPU/NIC topology: which devices there are, how far apart they sit, and
//! the host settings (ACS, IOMMU, link training) that decide whether
//! peer-to-peer DMA between them can work.
//!
//! Sources (see `docs/topo.md`): GPUs from `/proc/driver/nvidia/gpus` and
//! NVML; PCI paths, NUMA, link state, IOMMU groups and ACS from sysfs; NVLink
//! from NVML, else `nvidia-smi topo -m`; RDMA NICs and counters from
//! `/sys/class/infiniband`. Every reader takes a root directory so tests run
//! on a fake sysfs tree; [`discover`] reads the real one.
mod links;
pub mod nvml;
pub mod pci;
pub mod rdma;
mod render;

use std::{fs, path::Path, process::Command};

use links::{gpu_gpu_links, gpu_nic_links, preferred_nics};
pub use nvml::{Bar1, GpuTraffic, gpu_traffic, nvlink_traffic};
pub use pci::{AcsCtl, Bridge, PathClass, PciDevice, PcieLink};
pub use rdma::{Nic, Port, counter_delta, rdma_counters};
pub use render::render;
use serde::Serialize;

/// The path class of a software RDMA device (rxe, siw): no PCI function.
pub const SOFTWARE_PATH: &str = "none (software device)";

#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct Gpu {
    pub index: usize,
    /// PCI address, `0000:00:06.0`.
    pub bus: String,
    pub model: String,
    pub uuid: Option<String>,
    pub pci: Option<PciDevice>,
    /// BAR1 use (NVML); None without NVML.
    pub bar1: Option<Bar1>,
    /// Active NVLinks by peer (NVML); empty without NVML or NVLink.
    pub nvlink: Vec<NvlinkPeer>,
    /// PCIe replay (link-level retry) counter since driver load (NVML).
    pub pcie_replays: Option<u32>,
    /// The nearest RDMA NIC: best path class, then same NUMA node, then name.
    pub preferred_nic: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct NvlinkPeer {
    /// `GPU1` when the far end is a local GPU, else its PCI address (an
    /// NVSwitch, or a device this host does not list).
    pub peer: String,
    pub bus: String,
    pub links: u32,
}

/// What a trace saw on a pair (see [`Topo::annotate`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Observed {
    pub bytes: u64,
    pub registrations: u64,
}

/// One GPU–GPU or GPU–NIC pair.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct Link {
    pub a: String,
    pub b: String,
    /// `nvidia-smi topo -m` code: NV18, PIX, PXB, PHB, NODE, SYS, or
    /// [`SOFTWARE_PATH`] / `unknown`.
    pub kind: String,
    pub nvlink: bool,
    /// NVLink count between the pair, when NVLink joins them.
    pub nvlinks: Option<u32>,
    /// The PCIe path class from sysfs (even when NVLink also joins them).
    pub path: String,
    /// Where `kind` came from: `nvml`, `nvidia-smi`, `sysfs`.
    pub source: String,
    /// PCI bridges the PCIe path crosses.
    pub bridges: Vec<String>,
    /// Traffic and registrations a trace saw on this pair; None when nothing
    /// was observed (or nothing was annotated).
    pub observed: Option<Observed>,
}

/// IOMMU state of the host.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct Iommu {
    /// IOMMU units registered (`/sys/class/iommu/*`).
    pub units: Vec<String>,
    /// Number of IOMMU groups (`/sys/kernel/iommu_groups`).
    pub groups: usize,
    /// IOMMU parameters on the kernel command line (`iommu=`, `intel_iommu=`,
    /// `amd_iommu=`, `iommu.passthrough=`, `iommu.strict=`).
    pub cmdline: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct Topo {
    pub gpus: Vec<Gpu>,
    pub nics: Vec<Nic>,
    pub links: Vec<Link>,
    /// Bridges on the GPU/NIC paths, with their ACS control.
    pub bridges: Vec<Bridge>,
    pub iommu: Iommu,
    pub notes: Vec<String>,
}

/// `topo --format json` (`gdrtrace.topo/v1`, docs/formats.md): the
/// topology's fields, with the schema.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct TopoDoc {
    pub schema: String,
    #[serde(flatten)]
    pub topo: Topo,
}

pub const SCHEMA: &str = "gdrtrace.topo/v1";

impl TopoDoc {
    pub fn of(topo: Topo) -> Self {
        TopoDoc {
            schema: SCHEMA.into(),
            topo,
        }
    }
}

impl Topo {
    /// Whether any NVLink joins two GPUs (None when unknown).
    pub fn nvlink(&self) -> Option<bool> {
        let gpu_links: Vec<&Link> = self
            .links
            .iter()
            .filter(|l| self.is_gpu(&l.a) && self.is_gpu(&l.b))
            .collect();
        if self.gpus.len() < 2 || gpu_links.is_empty() {
            return None;
        }
        Some(gpu_links.iter().any(|l| l.nvlink))
    }

    fn is_gpu(&self, id: &str) -> bool {
        self.gpus.iter().any(|g| g.bus == id || format!("GPU{}", g.index) == id)
    }

    /// The canonical id of a GPU or NIC given as `GPU0`, a PCI address or a
    /// NIC name.
    fn id_of(&self, x: &str) -> Option<String> {
        let norm = pci::normalize_bdf(x);
        if let Some(g) = self
            .gpus
            .iter()
            .find(|g| format!("GPU{}", g.index) == x || g.bus == norm)
        {
            return Some(format!("GPU{}", g.index));
        }
        self.nics
            .iter()
            .find(|n| n.name == x || n.pci.as_ref().is_some_and(|p| p.bdf == norm))
            .map(|n| n.name.clone())
    }

    /// Annotates pairs with what a trace observed: `(a, b, bytes,
    /// registrations)`, each end a GPU (`GPU0` or its PCI address) or NIC
    /// (name or PCI address), in either order. Repeated pairs add up. An
    /// observation on a pair the topology does not have is kept as a note,
    /// not dropped.
    pub fn annotate(&mut self, observed: &[(String, String, u64, u64)]) {
        for (a, b, bytes, regs) in observed {
            let (ia, ib) = (self.id_of(a), self.id_of(b));
            let link = match (&ia, &ib) {
                (Some(x), Some(y)) => self
                    .links
                    .iter_mut()
                    .find(|l| (l.a == *x && l.b == *y) || (l.a == *y && l.b == *x)),
                _ => None,
            };
            match link {
                Some(l) => {
                    let o = l.observed.get_or_insert_with(Observed::default);
                    o.bytes = o.bytes.saturating_add(*bytes);
                    o.registrations = o.registrations.saturating_add(*regs);
                }
                None => self.notes.push(format!(
                    "observed {bytes} bytes and {regs} registrations between {a} and {b}, a pair this topology does not list"
                )),
            }
        }
    }
}

/// Removes ANSI escape sequences (`ESC [ ... letter`): nvidia-smi underlines
/// the matrix header even when its output is a pipe.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Parses the GPU-to-GPU part of `nvidia-smi topo -m`.
pub fn parse_topo_matrix(text: &str) -> Vec<Link> {
    let text = strip_ansi(text);
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let Some(header) = lines.next() else { return Vec::new() };
    let cols: Vec<&str> = header.split_whitespace().collect();
    let mut out = Vec::new();
    for line in lines {
        let cells: Vec<&str> = line.split_whitespace().collect();
        let Some(row) = cells.first() else { continue };
        if !row.starts_with("GPU") {
            continue;
        }
        for (i, col) in cols.iter().enumerate() {
            // Each pair once, upper triangle by GPU number (GPU10 after GPU9).
            let num = |s: &str| s.strip_prefix("GPU").and_then(|n| n.parse::<u32>().ok());
            match (num(col), num(row)) {
                (Some(c), Some(r)) if c > r => {}
                _ => continue,
            }
            if let Some(kind) = cells.get(i + 1) {
                out.push(Link {
                    a: row.to_string(),
                    b: col.to_string(),
                    kind: kind.to_string(),
                    nvlink: kind.starts_with("NV"),
                    nvlinks: kind.strip_prefix("NV").and_then(|n| n.parse().ok()),
                    source: "nvidia-smi".into(),
                    ..Link::default()
                });
            }
        }
    }
    out
}

/// The topology of this host.
pub fn discover() -> Topo {
    discover_at(Path::new("/"), true)
}

fn read_trim(p: &Path) -> Option<String> {
    fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The topology as seen under `root` (`/` on a real host). `driver`: ask
/// NVML and `nvidia-smi` too (false for a fake tree).
pub fn discover_at(root: &Path, driver: bool) -> Topo {
    let mut t = Topo::default();
    gpus(root, driver, &mut t);
    match rdma::nics(root) {
        Ok(n) => t.nics = n,
        Err(e) => t.notes.push(format!("no RDMA NIC: {e}")),
    }
    if t.nics.is_empty() && !t.notes.iter().any(|n| n.starts_with("no RDMA NIC")) {
        t.notes.push("no RDMA NIC: /sys/class/infiniband is empty".into());
    }
    gpu_gpu_links(driver, &mut t);
    gpu_nic_links(&mut t);
    preferred_nics(&mut t);
    bridges(root, &mut t);
    t.iommu = iommu(root);
    notes(&mut t);
    t
}

fn gpus(root: &Path, driver: bool, t: &mut Topo) {
    let proc_dir = root.join("proc/driver/nvidia/gpus");
    let from_nvml = if driver { Some(nvml::gpus()) } else { None };
    let mut entries: Vec<(String, String)> = match fs::read_dir(&proc_dir) {
        Ok(dir) => dir
            .flatten()
            .map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                (pci::normalize_bdf(&name), name)
            })
            .collect(),
        Err(_) => match &from_nvml {
            // Some containers hide /proc/driver/nvidia but expose NVML.
            Some(Ok(list)) if !list.is_empty() => {
                t.notes
                    .push("/proc/driver/nvidia/gpus does not exist: GPUs listed from NVML".into());
                list.iter().map(|g| (g.bus.clone(), String::new())).collect()
            }
            _ => {
                let unbound = pci::nvidia_functions(root);
                let also = if unbound.is_empty() {
                    String::new()
                } else {
                    format!("; NVIDIA PCI functions without a loaded driver: {}", unbound.join(", "))
                };
                t.notes.push(format!(
                    "no GPU: /proc/driver/nvidia/gpus does not exist (no NVIDIA driver loaded on this machine){also}"
                ));
                return;
            }
        },
    };
    entries.sort();
    for (index, (bus, name)) in entries.into_iter().enumerate() {
        let info = if name.is_empty() {
            String::new()
        } else {
            fs::read_to_string(proc_dir.join(&name).join("information")).unwrap_or_default()
        };
        let model = info
            .lines()
            .find_map(|l| l.strip_prefix("Model:"))
            .map(|m| m.trim().to_string())
            .unwrap_or_default();
        let pci = pci::device(root, &bus);
        t.gpus.push(Gpu {
            index,
            bus,
            model,
            pci,
            ..Gpu::default()
        });
    }
    if t.gpus.is_empty() {
        t.notes
            .push("no GPU: the NVIDIA driver is loaded but lists no GPU in /proc/driver/nvidia/gpus".into());
        return;
    }
    let Some(from_nvml) = from_nvml else { return };
    match from_nvml {
        Ok(list) => {
            let buses: Vec<(String, usize)> = t.gpus.iter().map(|g| (g.bus.clone(), g.index)).collect();
            for n in list {
                let Some(g) = t.gpus.iter_mut().find(|g| g.bus == n.bus) else {
                    t.notes.push(format!(
                        "NVML lists GPU {} that /proc/driver/nvidia/gpus does not",
                        n.bus
                    ));
                    continue;
                };
                if let Some(name) = n.name
                    && g.model.is_empty()
                {
                    g.model = name;
                }
                if let Some(p) = g.pci.as_mut()
                    && p.link.is_none()
                {
                    p.link = n.link;
                }
                g.uuid = n.uuid;
                g.bar1 = n.bar1;
                g.pcie_replays = n.pcie_replays;
                g.nvlink = n
                    .nvlink
                    .into_iter()
                    .map(|(bus, links)| NvlinkPeer {
                        peer: buses
                            .iter()
                            .find(|(b, _)| *b == bus)
                            .map(|(_, i)| format!("GPU{i}"))
                            .unwrap_or_else(|| unnamed_peer(&bus)),
                        bus,
                        links,
                    })
                    .collect();
            }
        }
        Err(e) => t.notes.push(format!(
            "{e}: no BAR1 use or NVLink peers (NVLink from nvidia-smi topo -m if it runs)"
        )),
    }
}

/// NVML reports `ffffffff:ff:ff.0` for a peer it cannot name (seen on
/// 2×H200 in a VM: the NVLink peer's PCI address is not exposed there).
fn unnamed_peer(bus: &str) -> String {
    if bus.starts_with("ffffffff:") {
        "a peer NVML cannot name (no PCI address; virtualized or behind an NVSwitch)".into()
    } else {
        bus.to_string()
    }
}

fn bridges(root: &Path, t: &mut Topo) {
    let mut all: Vec<String> = t.links.iter().flat_map(|l| l.bridges.iter().cloned()).collect();
    all.sort();
    all.dedup();
    t.bridges = all.iter().map(|b| pci::bridge(root, b)).collect();
}

/// The names in a directory, sorted (none when it cannot be read).
pub fn dir_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// IOMMU units, group count and kernel parameters under `root`.
pub fn iommu(root: &Path) -> Iommu {
    let cmdline = read_trim(&root.join("proc/cmdline")).unwrap_or_default();
    Iommu {
        units: dir_names(&root.join("sys/class/iommu")),
        groups: dir_names(&root.join("sys/kernel/iommu_groups")).len(),
        cmdline: cmdline
            .split_whitespace()
            // Arguments after `--` go to init, not the kernel.
            .take_while(|w| *w != "--")
            .filter(|w| {
                [
                    "iommu=",
                    "intel_iommu=",
                    "amd_iommu=",
                    "iommu.passthrough=",
                    "iommu.strict=",
                ]
                .iter()
                .any(|p| w.starts_with(p))
            })
            .map(str::to_string)
            .collect(),
    }
}

fn notes(t: &mut Topo) {
    let mut notes = Vec::new();
    for g in &t.gpus {
        if let Some(d) = g
            .pci
            .as_ref()
            .and_then(|p| p.link.as_ref())
            .and_then(|l| l.downtrained.as_ref())
        {
            notes.push(format!(
                "GPU{} {}: PCIe link below its maximum ({d}; GPUs lower the link speed when idle: check under load)",
                g.index, g.bus
            ));
        }
    }
    for n in &t.nics {
        if let Some(d) = n
            .pci
            .as_ref()
            .and_then(|p| p.link.as_ref())
            .and_then(|l| l.downtrained.as_ref())
        {
            notes.push(format!("{}: PCIe link below its maximum ({d})", n.name));
        }
        if n.software {
            notes.push(format!(
                "{}: software RDMA device on {}: no PCI function, so no GPUDirect RDMA through it",
                n.name,
                if n.netdevs.is_empty() {
                    "an unknown netdev".to_string()
                } else {
                    n.netdevs.join(", ")
                }
            ));
        }
    }
    for b in &t.bridges {
        if let Some(a) = &b.acs
            && a.redirects_p2p
        {
            notes.push(format!(
                "bridge {}: ACS redirects peer-to-peer traffic to the root complex (ACSCtl: {})",
                b.bdf,
                a.lspci()
            ));
        }
        if let Some(d) = b.link.as_ref().and_then(|l| l.downtrained.as_ref()) {
            notes.push(format!("bridge {}: PCIe link below its maximum ({d})", b.bdf));
        }
    }
    let translated: Vec<String> = t
        .gpus
        .iter()
        .filter_map(|g| g.pci.as_ref().map(|p| (format!("GPU{}", g.index), p)))
        .chain(
            t.nics
                .iter()
                .filter_map(|n| n.pci.as_ref().map(|p| (n.name.clone(), p))),
        )
        .filter(|(_, p)| p.iommu_type.as_deref().is_some_and(|ty| ty.starts_with("DMA")))
        .map(|(id, p)| {
            format!(
                "{id} (group {} {})",
                p.iommu_group.as_deref().unwrap_or("?"),
                p.iommu_type.as_deref().unwrap_or("")
            )
        })
        .collect();
    if !translated.is_empty() {
        notes.push(format!(
            "IOMMU translates DMA for {}: peer-to-peer DMA goes through the IOMMU (identity/passthrough avoids that)",
            translated.join(", ")
        ));
    }
    t.notes.extend(notes);
}

#[cfg(test)]
mod tests;
