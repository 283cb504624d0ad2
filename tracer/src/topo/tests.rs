//! Discovery on fake sysfs trees shaped like the real one: directories under
//! `sys/devices/pciDDDD:BB/`, `sys/bus/pci/devices/<bdf>` symlinks into them,
//! `sys/class/infiniband/<dev>` with a `device` link, `proc/...` files.
use std::{
    fs,
    os::unix::fs::symlink,
    path::{Path, PathBuf},
};

use super::{pci::PathClass, *};

struct Fake(PathBuf);

impl Fake {
    fn new(name: &str) -> Fake {
        let d = std::env::temp_dir().join(format!("gdrtrace-topo-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap_or_else(|e| panic!("creating {}: {e}", d.display()));
        Fake(d)
    }

    fn root(&self) -> &Path {
        &self.0
    }

    fn write(&self, rel: &str, data: impl AsRef<[u8]>) {
        let p = self.0.join(rel);
        fs::create_dir_all(p.parent().expect("parent")).unwrap_or_else(|e| panic!("mkdir for {rel}: {e}"));
        fs::write(&p, data).unwrap_or_else(|e| panic!("writing {rel}: {e}"));
    }

    fn link(&self, rel: &str, target: &str) {
        let p = self.0.join(rel);
        fs::create_dir_all(p.parent().expect("parent")).unwrap_or_else(|e| panic!("mkdir for {rel}: {e}"));
        if fs::symlink_metadata(&p).is_err() {
            symlink(target, &p).unwrap_or_else(|e| panic!("symlink {rel}: {e}"));
        }
    }

    /// A PCI function at `host/chain[0]/.../chain[n-1]`, every level with its
    /// `/sys/bus/pci/devices` link, as the kernel lays them out. Returns the
    /// device directory, relative to the root.
    fn pci(&self, host: &str, chain: &[&str], numa: i32) -> String {
        for i in 0..chain.len() {
            let rel = format!("sys/devices/{host}/{}", chain[..=i].join("/"));
            fs::create_dir_all(self.0.join(&rel)).unwrap_or_else(|e| panic!("mkdir {rel}: {e}"));
            if fs::metadata(self.0.join(&rel).join("numa_node")).is_err() {
                self.write(&format!("{rel}/numa_node"), format!("{numa}\n"));
            }
            self.link(
                &format!("sys/bus/pci/devices/{}", chain[i]),
                &format!("../../../devices/{host}/{}", chain[..=i].join("/")),
            );
        }
        format!("sys/devices/{host}/{}", chain.join("/"))
    }

    fn gpu(&self, bdf: &str) {
        self.write(
            &format!("proc/driver/nvidia/gpus/{bdf}/information"),
            "Model: \t\t NVIDIA H200\nIRQ:   16\n",
        );
    }

    /// A hardware RDMA device on PCI function `dir` (relative to the root).
    fn hca(&self, name: &str, dir: &str) {
        fs::create_dir_all(self.0.join(format!("sys/class/infiniband/{name}"))).expect("mkdir");
        self.link(
            &format!("sys/class/infiniband/{name}/device"),
            &format!("../../../../{dir}"),
        );
        self.write(&format!("sys/class/infiniband/{name}/hca_type"), "MT4129\n");
        self.write(&format!("sys/class/infiniband/{name}/fw_ver"), "28.39.1002\n");
        self.write(&format!("sys/class/infiniband/{name}/ports/1/state"), "4: ACTIVE\n");
        self.write(
            &format!("sys/class/infiniband/{name}/ports/1/rate"),
            "400 Gb/sec (4X NDR)\n",
        );
        self.write(&format!("{dir}/net/ib{name}/ifindex"), "5\n");
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn class(root: &Path, a: &str, b: &str) -> PathClass {
    let (da, db) = (
        pci::device(root, a).unwrap_or_else(|| panic!("{a} not found")),
        pci::device(root, b).unwrap_or_else(|| panic!("{b} not found")),
    );
    let (la, lb) = (da.location.expect("location"), db.location.expect("location"));
    pci::classify(&la, da.numa_node, &lb, db.numa_node).0
}

/// A two-socket host: a switch with a GPU and a NIC below it, a second-level
/// switch with another GPU, a GPU on its own root port, a NIC on a second
/// host bridge of socket 0, and a GPU on socket 1.
fn two_socket(f: &Fake) {
    let sw = ["0000:00:01.0", "0000:01:00.0"];
    f.pci("pci0000:00", &[sw[0], sw[1], "0000:02:08.0", "0000:03:00.0"], 0); // GPU0
    let nic = f.pci("pci0000:00", &[sw[0], sw[1], "0000:02:10.0", "0000:04:00.0"], 0); // mlx5_0
    f.pci(
        "pci0000:00",
        &[
            sw[0],
            sw[1],
            "0000:02:14.0",
            "0000:05:00.0",
            "0000:06:00.0",
            "0000:07:00.0",
        ],
        0,
    ); // GPU1
    f.pci("pci0000:00", &["0000:00:02.0", "0000:08:00.0"], 0); // GPU2
    let nic2 = f.pci("pci0000:40", &["0000:40:01.0", "0000:41:00.0"], 0); // mlx5_1
    f.pci("pci0000:80", &["0000:80:01.0", "0000:81:00.0"], 1); // GPU3
    for g in ["0000:03:00.0", "0000:07:00.0", "0000:08:00.0", "0000:81:00.0"] {
        f.gpu(g);
    }
    f.hca("mlx5_0", &nic);
    f.hca("mlx5_1", &nic2);
}

#[test]
fn path_classes() {
    let f = Fake::new("classes");
    two_socket(&f);
    let r = f.root();
    assert_eq!(class(r, "0000:03:00.0", "0000:04:00.0"), PathClass::Pix);
    assert_eq!(class(r, "0000:07:00.0", "0000:04:00.0"), PathClass::Pxb);
    assert_eq!(class(r, "0000:08:00.0", "0000:04:00.0"), PathClass::Phb);
    assert_eq!(class(r, "0000:03:00.0", "0000:41:00.0"), PathClass::Node);
    assert_eq!(class(r, "0000:81:00.0", "0000:04:00.0"), PathClass::Sys);
    // Two functions of one device count as PIX.
    f.pci(
        "pci0000:00",
        &["0000:00:01.0", "0000:01:00.0", "0000:02:10.0", "0000:04:00.1"],
        0,
    );
    assert_eq!(class(r, "0000:04:00.0", "0000:04:00.1"), PathClass::Pix);

    let t = discover_at(r, false);
    assert_eq!(t.gpus.len(), 4);
    assert_eq!(t.nics.len(), 2);
    let nic0 = &t.nics[0];
    assert_eq!(nic0.pci.as_ref().map(|p| p.bdf.as_str()), Some("0000:04:00.0"));
    assert_eq!(nic0.fw_ver.as_deref(), Some("28.39.1002"));
    assert_eq!(nic0.netdevs, ["ibmlx5_0"]);
    assert!(!nic0.software);
    let kind = |a: &str, b: &str| {
        t.links
            .iter()
            .find(|l| l.a == a && l.b == b)
            .map(|l| l.kind.clone())
            .unwrap_or_else(|| panic!("no {a}-{b} pair"))
    };
    assert_eq!(kind("GPU0", "mlx5_0"), "PIX");
    assert_eq!(kind("GPU0", "mlx5_1"), "NODE");
    assert_eq!(kind("GPU0", "GPU1"), "PXB");
    assert_eq!(kind("GPU0", "GPU3"), "SYS");
    let pref: Vec<Option<&str>> = t.gpus.iter().map(|g| g.preferred_nic.as_deref()).collect();
    // GPU1 (PXB) and GPU2 (PHB) are nearer mlx5_0 than mlx5_1 (NODE); GPU3
    // (socket 1) is SYS from both and on neither's node: the name decides.
    assert_eq!(pref, [Some("mlx5_0"), Some("mlx5_0"), Some("mlx5_0"), Some("mlx5_0")]);
    // The PIX path crosses the switch's upstream port and two downstream ports.
    let pix = t.links.iter().find(|l| l.a == "GPU0" && l.b == "mlx5_0").expect("pair");
    assert_eq!(pix.bridges, ["0000:01:00.0", "0000:02:08.0", "0000:02:10.0"]);
    let text = render(&t);
    let row = text.lines().find(|l| l.starts_with("GPU0  ")).unwrap_or_default();
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        ["GPU0", "X", "PXB", "PHB", "SYS", "PIX", "NODE"],
        "{text}"
    );
    assert!(text.contains("GPU0 <-> GPU1: PXB (PCIe)\n"), "{text}");
    assert!(!text.contains("GPU0 <-> mlx5_0"), "{text}");
    assert!(text.contains("NIC mlx5_0 0000:04:00.0 numa 0 MT4129 fw 28.39.1002 net ibmlx5_0\n  port 1: 4: ACTIVE, 400 Gb/sec (4X NDR)\n"), "{text}");
    assert!(text.contains("bridges 0000:00:01.0, 0000:00:02.0, "), "{text}");
}

#[test]
fn preferred_nic_ties_by_numa() {
    let f = Fake::new("numa");
    f.pci("pci0000:00", &["0000:00:01.0", "0000:01:00.0"], 0); // GPU on node 0
    f.gpu("0000:01:00.0");
    let far = f.pci("pci0000:80", &["0000:80:01.0", "0000:81:00.0"], 1);
    let near = f.pci("pci0000:40", &["0000:40:01.0", "0000:41:00.0"], 0);
    f.hca("a_far", &far);
    f.hca("b_near", &near);
    let t = discover_at(f.root(), false);
    let k: Vec<&str> = t.links.iter().map(|l| l.kind.as_str()).collect();
    assert_eq!(k, ["SYS", "NODE"]);
    assert_eq!(t.gpus[0].preferred_nic.as_deref(), Some("b_near"));
}

#[test]
fn downtrained_link() {
    let f = Fake::new("link");
    let d = f.pci("pci0000:00", &["0000:00:01.0", "0000:01:00.0"], -1);
    f.gpu("0000:01:00.0");
    f.write(&format!("{d}/current_link_speed"), "16.0 GT/s PCIe\n");
    f.write(&format!("{d}/max_link_speed"), "32.0 GT/s PCIe\n");
    f.write(&format!("{d}/current_link_width"), "8\n");
    f.write(&format!("{d}/max_link_width"), "16\n");
    let bridge = "sys/devices/pci0000:00/0000:00:01.0";
    f.write(&format!("{bridge}/current_link_speed"), "Unknown\n");
    f.write(&format!("{bridge}/max_link_speed"), "32.0 GT/s PCIe\n");
    f.write(&format!("{bridge}/current_link_width"), "16\n");
    f.write(&format!("{bridge}/max_link_width"), "16\n");
    let t = discover_at(f.root(), false);
    let p = t.gpus[0].pci.as_ref().expect("pci");
    assert_eq!(p.numa_node, None);
    let l = p.link.as_ref().expect("link");
    assert_eq!(l.current_width, Some(8));
    assert_eq!(
        l.downtrained.as_deref(),
        Some("width x8 of x16, speed 16.0 of 32.0 GT/s")
    );
    // An unknown speed is not a downtrained link.
    let b = pci::link_state(&f.root().join(bridge)).expect("bridge link");
    assert_eq!(b.downtrained, None);
    assert!(
        t.notes
            .iter()
            .any(|n| n.contains("GPU0 0000:01:00.0: PCIe link below its maximum"))
    );
    assert!(render(&t).contains("DOWNTRAINED, width x8 of x16"));
}

/// A PCIe bridge's configuration space as the sysfs `config` file holds it
/// (4096 bytes for root): type-1 header, then extended capabilities from
/// 0x100: AER (ID 0x0001, v2) → ACS (ID 0x000D, v1) at 0x148, with the ACS
/// Capability register 0x005f and Control 0x001d, which `lspci -vvv` prints as
/// `ACSCtl: SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-`.
fn bridge_config(acs_ctl: u16) -> Vec<u8> {
    let mut c = vec![0u8; 4096];
    c[0..2].copy_from_slice(&0x8086u16.to_le_bytes()); // vendor
    c[2..4].copy_from_slice(&0x347au16.to_le_bytes()); // device
    c[0x0a..0x0c].copy_from_slice(&0x0604u16.to_le_bytes()); // class: PCI bridge
    c[0x0e] = 0x01; // header type 1
    c[0x34] = 0x40; // capabilities pointer
    // Express capability (ID 0x10) at 0x40, type root port.
    c[0x40] = 0x10;
    c[0x42] = 0x42;
    let aer: u32 = 0x0001 | (2 << 16) | (0x148 << 20);
    c[0x100..0x104].copy_from_slice(&aer.to_le_bytes());
    let acs: u32 = 0x000D | (1 << 16);
    c[0x148..0x14c].copy_from_slice(&acs.to_le_bytes());
    c[0x14c..0x14e].copy_from_slice(&0x005fu16.to_le_bytes());
    c[0x14e..0x150].copy_from_slice(&acs_ctl.to_le_bytes());
    c
}

#[test]
fn acs_decode() {
    let a = pci::acs_from_config(&bridge_config(0x001d))
        .expect("readable")
        .expect("ACS present");
    assert_eq!((a.capability, a.control), (0x005f, 0x001d));
    assert_eq!(a.enabled, ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"]);
    assert!(a.redirects_p2p);
    assert_eq!(
        a.lspci(),
        "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
    );
    let off = pci::acs_from_config(&bridge_config(0))
        .expect("readable")
        .expect("ACS present");
    assert!(!off.redirects_p2p && off.enabled.is_empty());
    // No extended capability at all, and a non-root reader's 64 bytes.
    let mut none = bridge_config(0);
    none[0x100..0x104].copy_from_slice(&0u32.to_le_bytes());
    assert_eq!(pci::acs_from_config(&none), Ok(None));
    assert!(pci::acs_from_config(&none[..64]).is_err());
    // Conventional PCI: 256 bytes, no extended capabilities, so no ACS.
    assert_eq!(pci::acs_from_config(&none[..256]), Ok(None));

    // On a path: the switch ports' config files are read.
    let f = Fake::new("acs");
    two_socket(&f);
    f.write(
        "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/config",
        bridge_config(0x001d),
    );
    f.write(
        "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/config",
        bridge_config(0),
    );
    let t = discover_at(f.root(), false);
    let b = |bdf: &str| {
        t.bridges
            .iter()
            .find(|b| b.bdf == bdf)
            .unwrap_or_else(|| panic!("{bdf} not listed"))
    };
    assert!(b("0000:01:00.0").acs.as_ref().is_some_and(|a| a.redirects_p2p));
    assert!(b("0000:02:08.0").acs.as_ref().is_some_and(|a| !a.redirects_p2p));
    assert!(b("0000:02:10.0").acs_error.is_some());
    assert!(
        t.notes
            .iter()
            .any(|n| n.starts_with("bridge 0000:01:00.0: ACS redirects peer-to-peer traffic")),
        "{:?}",
        t.notes
    );
}

#[test]
fn iommu_groups() {
    let f = Fake::new("iommu");
    let d = f.pci("pci0000:00", &["0000:00:01.0", "0000:01:00.0"], 0);
    f.gpu("0000:01:00.0");
    f.write("sys/kernel/iommu_groups/7/type", "DMA-FQ\n");
    fs::create_dir_all(f.root().join("sys/kernel/iommu_groups/8")).expect("mkdir");
    f.link(&format!("{d}/iommu_group"), "../../../../kernel/iommu_groups/7");
    fs::create_dir_all(f.root().join("sys/class/iommu/dmar0")).expect("mkdir");
    f.write(
        "proc/cmdline",
        "BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on iommu=pt quiet -- iommu=not-the-kernel\n",
    );
    let t = discover_at(f.root(), false);
    let p = t.gpus[0].pci.as_ref().expect("pci");
    assert_eq!(
        (p.iommu_group.as_deref(), p.iommu_type.as_deref()),
        (Some("7"), Some("DMA-FQ"))
    );
    assert_eq!(t.iommu.units, ["dmar0"]);
    assert_eq!(t.iommu.groups, 2);
    assert_eq!(t.iommu.cmdline, ["intel_iommu=on", "iommu=pt"]);
    assert!(
        t.notes
            .iter()
            .any(|n| n.contains("IOMMU translates DMA for GPU0 (group 7 DMA-FQ)"))
    );
    let text = render(&t);
    assert!(text.contains("iommu group 7 (DMA-FQ)"), "{text}");
    assert!(
        text.contains("IOMMU: on (dmar0); 2 groups; kernel command line: intel_iommu=on iommu=pt"),
        "{text}"
    );
}

#[test]
fn soft_roce_has_no_pci_path() {
    let f = Fake::new("rxe");
    f.pci("pci0000:00", &["0000:00:01.0", "0000:01:00.0"], 0);
    f.gpu("0000:01:00.0");
    // The class entry links to a virtual device, as the kernel lays it out;
    // a `device` link to the netdev's PCI function must not make it PCI.
    let eth = f.pci("pci0000:00", &["0000:00:03.0"], 0);
    f.link("sys/class/infiniband/rxe0", "../../devices/virtual/infiniband/rxe0");
    f.link(
        "sys/devices/virtual/infiniband/rxe0/device",
        &format!("../../../../{eth}"),
    );
    let rxe = "sys/devices/virtual/infiniband/rxe0";
    f.write(&format!("{rxe}/parent"), "eth0\n");
    f.write(&format!("{rxe}/node_type"), "1: CA\n");
    f.write(&format!("{rxe}/ports/1/state"), "4: ACTIVE\n");
    f.write(&format!("{rxe}/ports/1/link_layer"), "Ethernet\n");
    f.write(&format!("{rxe}/ports/1/gid_attrs/ndevs/0"), "eth0\n");
    f.write(&format!("{rxe}/ports/1/counters/port_xmit_data"), "100\n");
    f.write(&format!("{rxe}/ports/1/hw_counters/retry_exceeded_err"), "2\n");
    f.write(&format!("{rxe}/ports/1/hw_counters/lifespan"), "10\n");
    let t = discover_at(f.root(), false);
    let n = &t.nics[0];
    assert!(n.software && n.pci.is_none());
    assert_eq!(n.netdevs, ["eth0"]);
    assert_eq!(n.ports[0].link_layer.as_deref(), Some("Ethernet"));
    let l = &t.links[0];
    assert_eq!(
        (l.a.as_str(), l.b.as_str(), l.kind.as_str()),
        ("GPU0", "rxe0", SOFTWARE_PATH)
    );
    assert_eq!(t.gpus[0].preferred_nic.as_deref(), Some("rxe0"));
    let text = render(&t);
    assert!(
        text.contains("NIC rxe0 software device (no PCI function) net eth0"),
        "{text}"
    );
    let row = text.lines().find(|l| l.starts_with("GPU0  ")).unwrap_or_default();
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        ["GPU0", "X", "SW"],
        "{text}"
    );
    assert!(
        text.contains("error/retry counters: 1/hw_counters/retry_exceeded_err=2"),
        "{text}"
    );

    let before = rdma::counters_at(f.root());
    assert_eq!(
        before.keys().map(String::as_str).collect::<Vec<_>>(),
        ["rxe0/1/hw_counters/retry_exceeded_err", "rxe0/1/port_xmit_data"]
    );
    f.write(&format!("{rxe}/ports/1/counters/port_xmit_data"), "350\n");
    f.write(&format!("{rxe}/ports/1/hw_counters/retry_exceeded_err"), "0\n");
    let d = counter_delta(&before, &rdma::counters_at(f.root()));
    assert_eq!(d["rxe0/1/port_xmit_data"], 250);
    // Reset in between: the value after, a lower bound.
    assert_eq!(d["rxe0/1/hw_counters/retry_exceeded_err"], 0);
}

#[test]
fn no_gpu_no_nic() {
    let f = Fake::new("empty");
    // An NVIDIA 3D controller without the driver.
    let d = f.pci("pci0000:00", &["0000:00:05.0"], -1);
    f.write(&format!("{d}/vendor"), "0x10de\n");
    f.write(&format!("{d}/class"), "0x030200\n");
    let t = discover_at(f.root(), false);
    assert!(t.gpus.is_empty() && t.nics.is_empty() && t.links.is_empty());
    assert_eq!(t.nvlink(), None);
    let text = render(&t);
    let first = text.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("no GPU: /proc/driver/nvidia/gpus does not exist"),
        "{text}"
    );
    assert!(first.ends_with("without a loaded driver: 0000:00:05.0"), "{text}");
    assert!(
        text.contains("no RDMA NIC: /sys/class/infiniband does not exist"),
        "{text}"
    );
    let json = serde_json::to_value(&t).expect("serializes");
    assert_eq!(json["gpus"], serde_json::json!([]));
}

#[test]
fn annotate_pairs() {
    let f = Fake::new("annotate");
    two_socket(&f);
    let mut t = discover_at(f.root(), false);
    t.annotate(&[
        ("GPU0".into(), "mlx5_0".into(), 4096, 2),
        ("mlx5_0".into(), "0000:03:00.0".into(), 1024, 1),
        ("GPU0".into(), "nosuch0".into(), 1, 1),
    ]);
    let l = t.links.iter().find(|l| l.a == "GPU0" && l.b == "mlx5_0").expect("pair");
    assert_eq!(
        l.observed,
        Some(Observed {
            bytes: 5120,
            registrations: 3
        })
    );
    assert_eq!(t.links.iter().filter(|l| l.observed.is_some()).count(), 1);
    assert!(t.notes.iter().any(|n| n.contains("between GPU0 and nosuch0")));
    assert!(render(&t).contains("GPU0 <-> mlx5_0: PIX (PCIe); observed 5.0 KiB in 3 registrations\n"));
    let json = serde_json::to_value(&t).expect("serializes");
    let pairs = json["links"].as_array().expect("links");
    assert!(pairs.iter().any(|p| p["observed"]["bytes"] == 5120));
    assert!(pairs.iter().any(|p| p["observed"].is_null()));
}

#[test]
fn h200_pair() {
    // `nvidia-smi topo -m` on the 2x H200 machine (driver 580).
    let text = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \tNV18\t0-31\t0\t\tN/A\nGPU1\tNV18\t X \t0-31\t0\t\tN/A\n";
    let l = parse_topo_matrix(text);
    assert_eq!(l.len(), 1);
    assert_eq!(
        (
            l[0].a.as_str(),
            l[0].b.as_str(),
            l[0].kind.as_str(),
            l[0].nvlink,
            l[0].nvlinks
        ),
        ("GPU0", "GPU1", "NV18", true, Some(18))
    );
    // As it prints into a pipe there: the header underlined with escapes.
    let piped = "\t\u{1b}[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\u{1b}[0m\nGPU0\t X \tNV18\t0-31\t0\t\tN/A\nGPU1\tNV18\t X \t0-31\t0\t\tN/A\n\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n";
    let l = parse_topo_matrix(piped);
    assert_eq!(l.len(), 1);
    assert_eq!(
        (l[0].a.as_str(), l[0].b.as_str(), l[0].kind.as_str()),
        ("GPU0", "GPU1", "NV18")
    );
    // Four GPUs in PCIe switches, plus a NIC column and row.
    let four = "\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\nGPU0\t X \tPIX\tSYS\tSYS\tPIX\t0-15\nGPU1\tPIX\t X \tSYS\tSYS\tPIX\t0-15\nGPU2\tSYS\tSYS\t X \tPXB\tSYS\t16-31\nGPU3\tSYS\tSYS\tPXB\t X \tSYS\t16-31\nNIC0\tPIX\tPIX\tSYS\tSYS\t X \n\nNIC Legend:\n\n  NIC0: mlx5_0\n";
    let kinds: Vec<String> = parse_topo_matrix(four)
        .iter()
        .map(|l| format!("{}-{}:{}", l.a, l.b, l.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            "GPU0-GPU1:PIX",
            "GPU0-GPU2:SYS",
            "GPU0-GPU3:SYS",
            "GPU1-GPU2:SYS",
            "GPU1-GPU3:SYS",
            "GPU2-GPU3:PXB"
        ]
    );
    // Eleven GPUs: GPU10 comes after GPU9, not after GPU1.
    let mut eleven = String::new();
    for c in 0..11 {
        eleven.push_str(&format!("\tGPU{c}"));
    }
    eleven.push('\n');
    for r in 0..11 {
        eleven.push_str(&format!("GPU{r}"));
        for c in 0..11 {
            eleven.push_str(if r == c { "\t X " } else { "\tNV18" });
        }
        eleven.push('\n');
    }
    let l = parse_topo_matrix(&eleven);
    assert_eq!(l.len(), 55);
    assert!(l.iter().any(|l| l.a == "GPU2" && l.b == "GPU10"));
    let pcie = "\tGPU0\tGPU1\nGPU0\t X \tPHB\nGPU1\tPHB\t X \n";
    assert!(!parse_topo_matrix(pcie)[0].nvlink);
}

#[test]
fn flat_vm_gpus() {
    // The GPU VM: both GPUs directly on the root bus of one host bridge.
    let f = Fake::new("vm");
    for g in ["0000:00:06.0", "0000:00:07.0"] {
        f.pci("pci0000:00", &[g], -1);
        f.gpu(g);
    }
    let t = discover_at(f.root(), false);
    assert_eq!(t.links.len(), 1);
    assert_eq!((t.links[0].kind.as_str(), t.links[0].source.as_str()), ("PHB", "sysfs"));
    assert_eq!(t.nvlink(), Some(false));
    assert!(render(&t).starts_with("GPU0 0000:00:06.0 NVIDIA H200\n"));
}

#[test]
fn bdf_forms() {
    assert_eq!(pci::normalize_bdf("00000000:06:00.0"), "0000:06:00.0");
    assert_eq!(pci::normalize_bdf("0000:AB:00.0"), "0000:ab:00.0");
    assert!(pci::is_bdf("0000:ab:00.1"));
    assert!(!pci::is_bdf("pci0000:00") && !pci::is_bdf("0000:zz:00.0"));
}

#[test]
fn host_config_spaces() {
    // Every PCI function of this host, as the kernel gives its config space:
    // the walk ends without error for root (for others, the 64-byte header
    // is an error that says so).
    let Ok(dir) = fs::read_dir("/sys/bus/pci/devices") else {
        println!("skipping: host_config_spaces: no /sys/bus/pci/devices");
        return;
    };
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut n = 0;
    for e in dir.flatten() {
        let Ok(cfg) = fs::read(e.path().join("config")) else {
            continue;
        };
        let r = pci::acs_from_config(&cfg);
        if root {
            assert!(r.is_ok(), "{}: {r:?}", e.path().display());
        }
        n += 1;
    }
    println!("{n} PCI functions read");
}

/// Pairs from NVML's per-GPU link lists (filled in as `nvml::gpus` would),
/// on the flat PCI tree of the GPU VM.
#[test]
fn nvlink_pairs() {
    let f = Fake::new("nvlink");
    let buses = ["0000:00:06.0", "0000:00:07.0", "0000:00:08.0"];
    for g in buses {
        f.pci("pci0000:00", &[g], -1);
        f.gpu(g);
    }
    let mut t = discover_at(f.root(), false);
    let peer = |peer: &str, bus: &str, links| NvlinkPeer {
        peer: peer.into(),
        bus: bus.into(),
        links,
    };
    // GPU0 and GPU1 directly (NV18, as on the 2x H200 machine); GPU1 and
    // GPU2 both to one switch; GPU0 and GPU2 each to a different device
    // this host does not list.
    t.gpus[0].nvlink = vec![peer("GPU1", buses[1], 18), peer("0000:9a:00.0", "0000:9a:00.0", 4)];
    t.gpus[1].nvlink = vec![peer("GPU0", buses[0], 18), peer("0000:c5:00.0", "0000:c5:00.0", 6)];
    t.gpus[2].nvlink = vec![
        peer("0000:c5:00.0", "0000:c5:00.0", 4),
        peer("0000:9b:00.0", "0000:9b:00.0", 2),
    ];
    t.gpus[0].bar1 = Some(Bar1 {
        total: 128 << 30,
        used: 3 << 20,
        free: (128 << 30) - (3 << 20),
    });
    t.links.clear();
    gpu_gpu_links(false, &mut t);
    let got: Vec<(String, String, Option<u32>, String)> = t
        .links
        .iter()
        .map(|l| (format!("{}-{}", l.a, l.b), l.kind.clone(), l.nvlinks, l.path.clone()))
        .collect();
    let want = [
        ("GPU0-GPU1", "NV18", Some(18), "PHB"),
        ("GPU0-GPU2", "PHB", None, "PHB"),
        ("GPU1-GPU2", "NV4", Some(4), "PHB"),
    ];
    assert_eq!(
        got,
        want.map(|(p, k, n, path)| (p.to_string(), k.to_string(), n, path.to_string()))
    );
    assert_eq!(t.nvlink(), Some(true));
    let text = render(&t);
    assert!(text.contains("GPU0 <-> GPU1: NV18 (NVLink; PCIe path PHB)\n"), "{text}");
    assert!(
        text.contains("BAR1 3.0 MiB used of 128.0 GiB, NVLink to GPU1 x18, 0000:9a:00.0 x4"),
        "{text}"
    );
}

#[test]
fn devices_a_process_holds_open() {
    let f = Fake::new("uverbs");
    f.write("sys/class/infiniband_verbs/uverbs0/ibdev", "mlx5_0\n");
    f.write("sys/class/infiniband_verbs/uverbs1/ibdev", "mlx5_1\n");
    f.link("proc/42/fd/3", "/dev/infiniband/uverbs1");
    f.link("proc/42/fd/4", "/dev/infiniband/rdma_cm");
    f.link("proc/42/fd/5", "socket:[1234]");
    f.link("proc/42/fd/6", "/dev/infiniband/uverbs1");
    assert_eq!(rdma::devices_opened(f.root(), 42), ["mlx5_1"]);
    assert!(
        rdma::devices_opened(f.root(), 43).is_empty(),
        "a process gone holds nothing"
    );
}
