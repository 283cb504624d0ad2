//! RDMA devices from `/sys/class/infiniband` (ABI:
//! `Documentation/ABI/stable/sysfs-class-infiniband`): model, firmware,
//! ports, netdevs, the PCI function behind each, and port counters.
use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::Path,
    time::{Duration, Instant},
};

use serde::Serialize;

use super::{
    dir_names,
    pci::{self, PciDevice},
};

/// One port of an RDMA device.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct Port {
    pub port: u32,
    /// `state`, e.g. `4: ACTIVE`.
    pub state: Option<String>,
    pub phys_state: Option<String>,
    /// e.g. `400 Gb/sec (4X NDR)`.
    pub rate: Option<String>,
    /// `InfiniBand` or `Ethernet` (RoCE).
    pub link_layer: Option<String>,
}

/// One RDMA device (`/sys/class/infiniband/<name>`).
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct Nic {
    pub name: String,
    /// No PCI function of its own (Soft-RoCE `rxe`, `siw`): it sits on a netdev.
    pub software: bool,
    pub pci: Option<PciDevice>,
    pub hca_type: Option<String>,
    pub fw_ver: Option<String>,
    pub board_id: Option<String>,
    pub node_desc: Option<String>,
    pub node_type: Option<String>,
    /// Network interfaces: `device/net/*`, else the ports' GID netdevs, else
    /// `parent` (rxe).
    pub netdevs: Vec<String>,
    pub ports: Vec<Port>,
    /// Port counters, keyed `port/counter` and `port/hw_counters/counter`.
    pub counters: BTreeMap<String, u64>,
}

fn read_trim(p: &Path) -> Option<String> {
    fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn class_dir(root: &Path) -> std::path::PathBuf {
    root.join("sys/class/infiniband")
}

/// The RDMA devices under `root`; Err (one line) when the class directory
/// does not exist, i.e. the kernel has no RDMA core.
pub fn nics(root: &Path) -> Result<Vec<Nic>, String> {
    let dir = class_dir(root);
    if !dir.is_dir() {
        return Err("/sys/class/infiniband does not exist (no RDMA core in this kernel)".into());
    }
    let counters = counters_at(root);
    Ok(dir_names(&dir).into_iter().map(|n| nic(root, &n, &counters)).collect())
}

fn nic(root: &Path, name: &str, all: &BTreeMap<String, u64>) -> Nic {
    let dir = class_dir(root).join(name);
    // A software device (rxe, siw) lives under /sys/devices/virtual, and rxe
    // has a `parent` attribute (its netdev); some kernels point its `device`
    // at the netdev's own PCI function, which is not the RDMA device's.
    let software = dir.join("parent").exists()
        || fs::canonicalize(&dir).is_ok_and(|p| p.components().any(|c| c.as_os_str() == "virtual"));
    // A hardware device's `device` link resolves into /sys/devices/pci*/.
    let bdf = fs::canonicalize(dir.join("device")).ok().and_then(|p| {
        let l = pci::location_of(&p)?;
        l.chain.last().cloned()
    });
    let pci = bdf.as_deref().filter(|_| !software).and_then(|b| pci::device(root, b));
    let mut netdevs = dir_names(&dir.join("device/net"));
    let ports: Vec<Port> = dir_names(&dir.join("ports"))
        .into_iter()
        .filter_map(|p| {
            let pdir = dir.join("ports").join(&p);
            // Unused GID slots fail to read (EINVAL): skip them.
            for n in dir_names(&pdir.join("gid_attrs/ndevs")) {
                if let Some(nd) = read_trim(&pdir.join("gid_attrs/ndevs").join(n))
                    && !netdevs.contains(&nd)
                {
                    netdevs.push(nd);
                }
            }
            Some(Port {
                port: p.parse().ok()?,
                state: read_trim(&pdir.join("state")),
                phys_state: read_trim(&pdir.join("phys_state")),
                rate: read_trim(&pdir.join("rate")),
                link_layer: read_trim(&pdir.join("link_layer")),
            })
        })
        .collect();
    if netdevs.is_empty()
        && let Some(p) = read_trim(&dir.join("parent"))
    {
        netdevs.push(p);
    }
    let prefix = format!("{name}/");
    Nic {
        name: name.to_string(),
        software: software || pci.is_none(),
        pci,
        hca_type: read_trim(&dir.join("hca_type")),
        fw_ver: read_trim(&dir.join("fw_ver")),
        board_id: read_trim(&dir.join("board_id")),
        node_desc: read_trim(&dir.join("node_desc")),
        node_type: read_trim(&dir.join("node_type")),
        netdevs,
        ports,
        counters: all
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?.to_string(), *v)))
            .collect(),
    }
}

/// Every RDMA port counter on this host, keyed `dev/port/counter` (from
/// `ports/*/counters/*`) and `dev/port/hw_counters/counter` (driver-specific
/// `ports/*/hw_counters/*`). Sample before and after a trace and subtract
/// with [`counter_delta`]. Note `port_xmit_data`/`port_rcv_data` count
/// 4-byte words (IBA PortCounters), not bytes.
pub fn rdma_counters() -> BTreeMap<String, u64> {
    counters_at(Path::new("/"))
}

/// [`rdma_counters`] under another sysfs root.
pub fn counters_at(root: &Path) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let class = class_dir(root);
    for dev in dir_names(&class) {
        for port in dir_names(&class.join(&dev).join("ports")) {
            for (sub, key) in [("counters", ""), ("hw_counters", "hw_counters/")] {
                let cdir = class.join(&dev).join("ports").join(&port).join(sub);
                for c in dir_names(&cdir) {
                    // `lifespan` is the hw_counters refresh period, not a count.
                    if c == "lifespan" {
                        continue;
                    }
                    if let Some(v) = read_trim(&cdir.join(&c)).and_then(|s| s.parse::<u64>().ok()) {
                        out.insert(format!("{dev}/{port}/{key}{c}"), v);
                    }
                }
            }
        }
    }
    out
}

/// `after - before` for every counter present in both samples. A counter
/// that went down was reset (or wrapped) in between: its delta is its value
/// after the reset, a lower bound.
pub fn counter_delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter_map(|(k, a)| {
            let b = before.get(k)?;
            Some((k.clone(), if a >= b { a - b } else { *a }))
        })
        .collect()
}

/// Whether a counter name counts errors, retries or drops (shown in text).
pub fn is_error_counter(name: &str) -> bool {
    let n = name.rsplit('/').next().unwrap_or(name);
    [
        "err",
        "retry",
        "discard",
        "drop",
        "timeout",
        "downed",
        "out_of_sequence",
        "duplicate",
        "rnr",
        "recover",
        "violation",
        "overrun",
    ]
    .iter()
    .any(|w| n.contains(w))
}

/// The RDMA devices whose verbs device node (`/dev/infiniband/uverbsN`)
/// process `pid` holds open, by name (`/sys/class/infiniband_verbs/
/// uverbsN/ibdev`): the devices its verbs traffic can take. A process
/// that opens every device to query it (NCCL does at init) names them all.
pub fn devices_opened(root: &Path, pid: u32) -> Vec<String> {
    let fds = root.join(format!("proc/{pid}/fd"));
    let mut out: Vec<String> = dir_names(&fds)
        .into_iter()
        .filter_map(|fd| {
            let target = fs::read_link(fds.join(fd)).ok()?;
            let node = target.to_str()?.strip_prefix("/dev/infiniband/")?;
            node.starts_with("uverbs").then(|| node.to_string())
        })
        .filter_map(|node| read_trim(&root.join("sys/class/infiniband_verbs").join(node).join("ibdev")))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The RDMA devices traced processes hold open ([`devices_opened`]): a
/// process is looked at when it makes a verbs call (`look_now`), and where
/// none is seen (set up before the trace, or in a library not traced) a
/// second apart for its first `TRIES` seconds (`look`); not again once it
/// holds one. A process with thousands of descriptors costs a few
/// milliseconds a look, so it is not looked at for ever.
#[derive(Debug, Default)]
pub struct Holders {
    held: BTreeMap<u32, BTreeSet<String>>,
    /// When each process was last looked at, and how often.
    looked: BTreeMap<u32, (Instant, u32)>,
}

impl Holders {
    const AGAIN: Duration = Duration::from_secs(1);
    const TRIES: u32 = 3;

    /// Looks at the processes that are due.
    pub fn look(&mut self, pids: impl Iterator<Item = u32>) {
        let now = Instant::now();
        for pid in pids {
            let due = self
                .looked
                .get(&pid)
                .is_none_or(|(t, n)| *n < Self::TRIES && now.duration_since(*t) >= Self::AGAIN);
            if due {
                self.look_now(pid);
            }
        }
    }

    /// Looks at a process now (it just made a verbs call: a device is open),
    /// unless it was seen holding one.
    pub fn look_now(&mut self, pid: u32) {
        if self.held.contains_key(&pid) {
            return;
        }
        let tries = self.looked.get(&pid).map_or(0, |(_, n)| *n);
        self.looked.insert(pid, (Instant::now(), tries + 1));
        let found = devices_opened(Path::new("/"), pid);
        if !found.is_empty() {
            self.held.insert(pid, found.into_iter().collect());
        }
    }

    /// The devices each process was seen holding.
    pub fn held(&self) -> &BTreeMap<u32, BTreeSet<String>> {
        &self.held
    }

    /// Drops a process no longer tracked.
    pub fn forget(&mut self, pid: u32) {
        self.held.remove(&pid);
        self.looked.remove(&pid);
    }
}
