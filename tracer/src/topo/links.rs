//! The links of the topology: GPU to GPU (NVLink from NVML or `nvidia-smi
//! topo -m`, else the PCIe path between them) and GPU to NIC (the PCIe
//! path class), and each GPU's preferred NIC.
use super::*;

fn pcie_path(a: Option<&PciDevice>, b: Option<&PciDevice>) -> (String, Option<PathClass>, Vec<String>) {
    match (a, b) {
        (Some(a), Some(b)) => match (&a.location, &b.location) {
            (Some(la), Some(lb)) => {
                let (c, br) = pci::classify(la, a.numa_node, lb, b.numa_node);
                (c.as_str().to_string(), Some(c), br)
            }
            _ => ("unknown".into(), None, Vec::new()),
        },
        _ => ("unknown".into(), None, Vec::new()),
    }
}

pub(super) fn gpu_gpu_links(driver: bool, t: &mut Topo) {
    let n = t.gpus.len();
    if n < 2 {
        return;
    }
    let smi = if driver {
        match Command::new("nvidia-smi").args(["topo", "-m"]).output() {
            Ok(o) if o.status.success() => Some(parse_topo_matrix(&String::from_utf8_lossy(&o.stdout))),
            _ => None,
        }
    } else {
        None
    };
    let nvml_known = t.gpus.iter().any(|g| g.bar1.is_some() || !g.nvlink.is_empty());
    for i in 0..n {
        for j in i + 1..n {
            let (ga, gb) = (&t.gpus[i], &t.gpus[j]);
            let (path, _, bridges) = pcie_path(ga.pci.as_ref(), gb.pci.as_ref());
            let (a, b) = (format!("GPU{}", ga.index), format!("GPU{}", gb.index));
            let direct = ga.nvlink.iter().find(|p| p.bus == gb.bus).map(|p| p.links);
            // Links from both GPUs to the same device that is not a local GPU
            // (an NVSwitch): NVLink between them through it.
            let shared: u32 = ga
                .nvlink
                .iter()
                .filter(|p| !p.peer.starts_with("GPU"))
                .filter_map(|p| gb.nvlink.iter().find(|q| q.bus == p.bus).map(|q| p.links.min(q.links)))
                .sum();
            let via_switch = Some(shared).filter(|n| *n > 0);
            let smi_link = smi
                .as_ref()
                .and_then(|m| m.iter().find(|l| (l.a == a && l.b == b) || (l.a == b && l.b == a)));
            let mut link = Link {
                a,
                b,
                path: path.clone(),
                bridges,
                ..Link::default()
            };
            if let Some(n) = direct.or(via_switch) {
                link.kind = format!("NV{n}");
                link.nvlink = true;
                link.nvlinks = Some(n);
                link.source = "nvml".into();
            } else if let Some(s) = smi_link
                && (s.nvlink || !nvml_known)
            {
                link.kind = s.kind.clone();
                link.nvlink = s.nvlink;
                link.nvlinks = s.nvlinks;
                link.source = "nvidia-smi".into();
            } else {
                link.kind = path;
                link.source = "sysfs".into();
            }
            if let Some(s) = smi_link
                && s.kind != link.kind
            {
                t.notes.push(format!(
                    "{} <-> {}: {} says {}, nvidia-smi topo -m says {}",
                    link.a, link.b, link.source, link.kind, s.kind
                ));
            }
            t.links.push(link);
        }
    }
}

pub(super) fn gpu_nic_links(t: &mut Topo) {
    let mut out = Vec::new();
    for g in &t.gpus {
        for n in &t.nics {
            let (path, bridges) = if n.software {
                (SOFTWARE_PATH.to_string(), Vec::new())
            } else {
                let (p, _, br) = pcie_path(g.pci.as_ref(), n.pci.as_ref());
                (p, br)
            };
            out.push(Link {
                a: format!("GPU{}", g.index),
                b: n.name.clone(),
                kind: path.clone(),
                path,
                source: "sysfs".into(),
                bridges,
                ..Link::default()
            });
        }
    }
    t.links.extend(out);
}

/// Rank of a path for NIC choice: PIX first, software devices last.
fn rank(path: &str) -> u8 {
    match path {
        "PIX" => 0,
        "PXB" => 1,
        "PHB" => 2,
        "NODE" => 3,
        "SYS" => 4,
        "unknown" => 5,
        _ => 6,
    }
}

pub(super) fn preferred_nics(t: &mut Topo) {
    for gi in 0..t.gpus.len() {
        let g = &t.gpus[gi];
        let gid = format!("GPU{}", g.index);
        let gnuma = g.pci.as_ref().and_then(|p| p.numa_node);
        let best = t
            .links
            .iter()
            .filter(|l| l.a == gid && t.nics.iter().any(|n| n.name == l.b))
            .min_by_key(|l| {
                let numa = t
                    .nics
                    .iter()
                    .find(|n| n.name == l.b)
                    .and_then(|n| n.pci.as_ref())
                    .map(|p| p.numa_node);
                (rank(&l.path), numa != Some(gnuma), l.b.clone())
            })
            .map(|l| l.b.clone());
        t.gpus[gi].preferred_nic = best;
    }
}
