//! `gdrtrace topo` text: GPUs, an `nvidia-smi topo -m` style matrix, NICs,
//! bridges with ACS, IOMMU, notes.
use std::fmt::Write as _;

use super::{Link, PcieLink, Topo, rdma};
use crate::units::bytes_spaced as bytes;

fn link(l: &PcieLink) -> String {
    let cur = format!(
        "{} x{}",
        l.current_speed.as_deref().unwrap_or("?"),
        l.current_width.map_or("?".into(), |w| w.to_string())
    );
    let max = format!(
        "{} x{}",
        l.max_speed.as_deref().unwrap_or("?"),
        l.max_width.map_or("?".into(), |w| w.to_string())
    );
    match &l.downtrained {
        Some(d) => format!("PCIe {cur} (max {max}: DOWNTRAINED, {d})"),
        None => format!("PCIe {cur} (max {max})"),
    }
}

fn numa(n: Option<u32>) -> String {
    n.map_or("-".into(), |n| n.to_string())
}

fn pair_line(l: &Link) -> String {
    let how = if l.nvlink {
        format!(" (NVLink; PCIe path {})", l.path)
    } else if l.kind == super::SOFTWARE_PATH || l.kind == "unknown" {
        String::new()
    } else {
        " (PCIe)".into()
    };
    let seen = l.observed.map_or(String::new(), |o| {
        format!("; observed {} in {} registrations", bytes(o.bytes), o.registrations)
    });
    format!("{} <-> {}: {}{how}{seen}\n", l.a, l.b, l.kind)
}

/// A line per GPU, and one of its PCIe, BAR1, IOMMU, NVLink and NIC details.
fn gpus(o: &mut String, t: &Topo) {
    for g in &t.gpus {
        let _ = writeln!(o, "GPU{} {} {}", g.index, g.bus, g.model);
        let mut d = Vec::new();
        let p = g.pci.as_ref();
        d.push(format!("numa {}", numa(p.and_then(|p| p.numa_node))));
        if let Some(l) = p.and_then(|p| p.link.as_ref()) {
            d.push(link(l));
        }
        if let Some(b) = g.bar1 {
            d.push(format!("BAR1 {} used of {}", bytes(b.used), bytes(b.total)));
        }
        if let Some(p) = p
            && let Some(grp) = &p.iommu_group
        {
            d.push(format!(
                "iommu group {grp} ({})",
                p.iommu_type.as_deref().unwrap_or("type unknown")
            ));
        }
        if !g.nvlink.is_empty() {
            let peers: Vec<String> = g.nvlink.iter().map(|p| format!("{} x{}", p.peer, p.links)).collect();
            d.push(format!("NVLink to {}", peers.join(", ")));
        }
        if let Some(r) = g.pcie_replays {
            d.push(format!("PCIe replays {r}"));
        }
        if !t.nics.is_empty() {
            d.push(format!("nearest NIC {}", g.preferred_nic.as_deref().unwrap_or("none")));
        }
        let _ = writeln!(o, "  {}", d.join(", "));
    }
}

/// A line per NIC, its PCIe link, its ports and its non-zero error counters.
fn nics(o: &mut String, t: &Topo) {
    for n in &t.nics {
        let mut head = format!("NIC {}", n.name);
        match &n.pci {
            Some(p) => {
                let _ = write!(head, " {} numa {}", p.bdf, numa(p.numa_node));
            }
            None => head.push_str(" software device (no PCI function)"),
        }
        for (k, v) in [("", &n.hca_type), ("fw ", &n.fw_ver), ("board ", &n.board_id)] {
            if let Some(v) = v {
                let _ = write!(head, " {k}{v}");
            }
        }
        if !n.netdevs.is_empty() {
            let _ = write!(head, " net {}", n.netdevs.join(","));
        }
        let _ = writeln!(o, "{head}");
        if let Some(l) = n.pci.as_ref().and_then(|p| p.link.as_ref()) {
            let _ = writeln!(o, "  {}", link(l));
        }
        for p in &n.ports {
            let parts: Vec<&str> = [&p.state, &p.phys_state, &p.rate, &p.link_layer]
                .into_iter()
                .filter_map(|v| v.as_deref())
                .collect();
            let _ = writeln!(o, "  port {}: {}", p.port, parts.join(", "));
        }
        let errs: Vec<String> = n
            .counters
            .iter()
            .filter(|(k, v)| **v > 0 && rdma::is_error_counter(k))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if !errs.is_empty() {
            let _ = writeln!(o, "  error/retry counters: {}", errs.join(" "));
        }
    }
}

/// A line per bridge with its ACS control; those whose ACS could not be
/// read one line per reason.
fn bridges(o: &mut String, t: &Topo) {
    // Bridges whose ACS could not be read share one line per reason (as
    // non-root, every bridge fails the same way).
    let mut unread: Vec<(&str, Vec<&str>)> = Vec::new();
    for b in &t.bridges {
        let acs = match (&b.acs, &b.acs_error) {
            (Some(a), _) => format!("ACSCtl: {}", a.lspci()),
            (None, Some(e)) => {
                match unread.iter_mut().find(|(r, _)| r == e) {
                    Some((_, v)) => v.push(&b.bdf),
                    None => unread.push((e, vec![&b.bdf])),
                }
                continue;
            }
            (None, None) => "no ACS capability".into(),
        };
        let l = b.link.as_ref().map(|l| format!(", {}", link(l))).unwrap_or_default();
        let _ = writeln!(o, "bridge {} {acs}{l}", b.bdf);
    }
    for (why, v) in unread {
        let _ = writeln!(
            o,
            "bridge{} {}: ACS unknown: {why}",
            if v.len() > 1 { "s" } else { "" },
            v.join(", ")
        );
    }
}

/// Whether an IOMMU is on, its groups and the kernel command line.
fn iommu(o: &mut String, t: &Topo) {
    let i = &t.iommu;
    let _ = writeln!(
        o,
        "IOMMU: {}; {} groups; kernel command line: {}",
        if i.units.is_empty() {
            "no IOMMU unit registered (off)".to_string()
        } else {
            format!("on ({})", i.units.join(", "))
        },
        i.groups,
        if i.cmdline.is_empty() {
            "no iommu parameter".to_string()
        } else {
            i.cmdline.join(" ")
        }
    );
}

pub fn render(t: &Topo) -> String {
    let mut o = String::new();
    let no_gpu = t.notes.iter().find(|n| n.starts_with("no GPU"));
    if let Some(n) = no_gpu {
        let _ = writeln!(o, "{n}");
    }
    gpus(&mut o, t);
    // GPU pairs in words; GPU-NIC pairs are in the matrix, and in words only
    // when a trace observed traffic on them.
    let gpu = |id: &str| t.gpus.iter().any(|g| format!("GPU{}", g.index) == id);
    for l in t
        .links
        .iter()
        .filter(|l| (gpu(&l.a) && gpu(&l.b)) || l.observed.is_some())
    {
        o.push_str(&pair_line(l));
    }
    matrix(t, &mut o);
    nics(&mut o, t);
    bridges(&mut o, t);
    iommu(&mut o, t);
    for n in &t.notes {
        if Some(n) != no_gpu {
            let _ = writeln!(o, "{n}");
        }
    }
    if !t.links.is_empty() {
        o.push_str(
            "Legend: X = self, NV# = NVLink with # links, PIX = at most one PCIe bridge, PXB = several PCIe bridges, \
             PHB = through the PCIe host bridge, NODE = between host bridges of one NUMA node, SYS = across NUMA nodes, \
             SW = software RDMA device (no PCI path)\n",
        );
    }
    o
}

/// The `nvidia-smi topo -m` style matrix: GPUs as rows, GPUs and NICs as
/// columns.
fn matrix(t: &Topo, o: &mut String) {
    if t.gpus.is_empty() || (t.gpus.len() < 2 && t.nics.is_empty()) {
        return;
    }
    let rows: Vec<String> = t.gpus.iter().map(|g| format!("GPU{}", g.index)).collect();
    let cols: Vec<String> = rows
        .iter()
        .cloned()
        .chain(t.nics.iter().map(|n| n.name.clone()))
        .collect();
    let cell = |r: &str, c: &str| -> String {
        if r == c {
            return "X".into();
        }
        t.links
            .iter()
            .find(|l| (l.a == r && l.b == c) || (l.a == c && l.b == r))
            .map_or("-".into(), |l| {
                if l.kind == super::SOFTWARE_PATH {
                    "SW".into()
                } else {
                    l.kind.clone()
                }
            })
    };
    let w = cols.iter().map(String::len).max().unwrap_or(4).max(5) + 2;
    let _ = write!(o, "{:w$}", "");
    for c in &cols {
        let _ = write!(o, "{c:<w$}");
    }
    o.push('\n');
    for r in &rows {
        let _ = write!(o, "{r:w$}");
        for c in &cols {
            let _ = write!(o, "{:<w$}", cell(r, c));
        }
        o.push('\n');
    }
}
