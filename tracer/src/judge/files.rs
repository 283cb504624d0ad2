//! File paths (GPUDirect Storage): one per (file, direction, memory) of a
//! cuFile process, judged from where its bytes went in the windows its
//! reads or writes carried (docs/gds.md):
//!
//! - nvidia-fs ioctls and no host bytes: `gds-direct (nvidia-fs)`;
//! - copies between GPU and host memory (the bounce buffers), or the
//!   file's own POSIX I/O with them: compat mode, host-staged, the bytes
//!   staged counted from the file I/O (else the copies);
//! - the file's POSIX I/O with no copies on GPU memory, where P2PDMA is
//!   enabled or the kernel mapped P2P pages: `gds-p2pdma`;
//! - a direct path whose shared windows hold host bytes is `ambiguous`;
//! - in a window several file paths carried, each with POSIX I/O of its
//!   own file and direction, the copies between GPU and host memory are
//!   shared among them in proportion to that I/O (compat mode copies each
//!   byte of it through a bounce buffer once).
//!
//! A compat path's cause is one decision (`classify::gds::Cause`), made
//! from the process's environment and cufile.json, the host's nvidia-fs,
//! the file's filesystem, device and open flags, the first calls' sizes
//! and offsets, and the IOMMU and ACS.
use std::collections::{BTreeMap, BTreeSet};

use super::{Inputs, ProcessIn};
use crate::{
    classify::{
        Transport,
        comm::Basis,
        gds::{Cause, FileIo, GdsProcess, IoSample, Via},
        path::{OpClass, Path, PeerKind},
    },
    host::HostFacts,
    stats::windows::{Window, row_key},
};

/// Evidence counts where it is at least this share of a path's bytes.
const SHARE: f64 = 0.10;
/// The block size O_DIRECT and GPUDirect Storage align to.
const BLOCK: u64 = 4096;
/// Filesystems with GPUDirect Storage support (nvidia-fs or P2PDMA), per
/// the GDS release notes: local ext4 and xfs on NVMe (or NVMe-oF, RAID),
/// and the distributed ones with GDS clients.
const LOCAL_FS: [&str; 2] = ["ext4", "xfs"];
const DISTRIBUTED_FS: [&str; 7] = ["nfs", "nfs4", "lustre", "gpfs", "wekafs", "beegfs", "scatefs"];

/// One candidate path and what it is judged from.
struct Candidate {
    path: Path,
    rows: BTreeSet<String>,
    /// The file's key, where its handle's registration was seen.
    file: Option<String>,
    samples: Vec<IoSample>,
}

/// What moved in the windows a path carried.
#[derive(Debug, Default)]
struct Evidence {
    host_copy: u64,
    device_copy: u64,
    socket: u64,
    shared_host: u64,
    carried: u64,
    /// Positional file I/O per file key, in the path's direction, and in
    /// the other one.
    file_io: BTreeMap<String, u64>,
    nvfs_ioctls: u64,
}

impl Evidence {
    fn add(&mut self, w: &Window, write: bool) {
        self.carried += 1;
        self.host_copy += w.host_copy_bytes;
        self.device_copy += w.device_copy_bytes;
        self.socket += w.socket_bytes;
        self.nvfs_ioctls += w.nvfs_ioctls;
        for (k, b) in if write { &w.file_write_bytes } else { &w.file_read_bytes } {
            *self.file_io.entry(k.clone()).or_default() += b;
        }
    }
}

/// The host bytes of a window: copies to or from host memory and sockets,
/// each staged byte counted once.
fn host_of(w: &Window) -> u64 {
    w.host_copy_bytes.max(w.socket_bytes)
}

/// The file paths of one process (none: it did not use libcufile).
pub(super) fn paths(i: &Inputs, p: &ProcessIn, windows: &[&Window]) -> Vec<Path> {
    let Some(g) = i.gds.as_ref().and_then(|g| g.process(p.pid)) else {
        return Vec::new();
    };
    let cands = candidates(g);
    let evidence = evidence_of(&cands, windows);
    cands
        .into_iter()
        .zip(evidence)
        .map(|(c, e)| judge(c, &e, g, p, i.facts.as_ref(), !windows.is_empty()))
        .collect()
}

/// One candidate per (file or handle, direction, memory) from the rows of
/// reads and writes.
fn candidates(g: &GdsProcess) -> Vec<Candidate> {
    let mut out: BTreeMap<(String, OpClass, String), Candidate> = BTreeMap::new();
    for io in g.io.iter().filter(|x| x.calls + x.failed > 0) {
        let op = OpClass::of_op(&io.op);
        let file = g
            .handles
            .iter()
            .find(|h| h.handle == io.handle)
            .and_then(|h| h.file.clone());
        let memory = io.sample.as_ref().map_or("unknown", |s| s.memory.as_str()).to_string();
        let peer = match &file {
            Some(k) => g.file(k).map_or_else(|| k.clone(), FileIo::name),
            None => format!("handle {}", io.handle),
        };
        let c = out
            .entry((peer.clone(), op, memory.clone()))
            .or_insert_with(|| Candidate {
                path: Path::new(g.pid, PeerKind::File, peer, op, &memory),
                rows: BTreeSet::new(),
                file: file.clone(),
                samples: Vec::new(),
            });
        c.path.calls += io.calls;
        c.path.bytes += io.bytes;
        let handle = u64::from_str_radix(io.handle.trim_start_matches("0x"), 16).unwrap_or(0);
        c.rows.insert(row_key(&io.op, handle));
        c.samples.extend(io.sample.clone());
    }
    out.into_values().collect()
}

/// Each candidate's evidence: the windows it carried alone; of those it
/// shared, the host bytes (which it cannot be told apart from) and the
/// file I/O of its own file and direction, when it alone had that file.
fn evidence_of(cands: &[Candidate], windows: &[&Window]) -> Vec<Evidence> {
    let mut out: Vec<Evidence> = cands.iter().map(|_| Evidence::default()).collect();
    let write = |c: &Candidate| c.path.op == OpClass::FileWrite;
    for w in windows.iter().filter(|w| !w.paths.is_empty()) {
        let carriers: Vec<usize> = cands
            .iter()
            .enumerate()
            .filter(|(_, c)| w.paths.iter().any(|k| c.rows.contains(k)))
            .map(|(i, _)| i)
            .collect();
        match carriers.as_slice() {
            [] => {}
            [one] => out[*one].add(w, write(&cands[*one])),
            many => {
                // The file's I/O in this direction, where only this path has
                // the file; a path whose handle was registered before
                // tracing began takes the one file with I/O in its direction.
                let mine = |c: &Candidate| (c.file.clone(), write(c));
                let own: Vec<Option<(String, u64)>> = many
                    .iter()
                    .map(|&i| {
                        let unique = many.iter().filter(|j| mine(&cands[**j]) == mine(&cands[i])).count() == 1;
                        let io = if write(&cands[i]) {
                            &w.file_write_bytes
                        } else {
                            &w.file_read_bytes
                        };
                        match (&cands[i].file, unique) {
                            (Some(k), true) => Some((k.clone(), io.get(k).copied().unwrap_or(0))),
                            (None, true) => match io.iter().filter(|(_, b)| **b > 0).collect::<Vec<_>>().as_slice() {
                                [(k, b)] => Some(((*k).clone(), **b)),
                                _ => None,
                            },
                            _ => None,
                        }
                    })
                    .collect();
                let own_io: Vec<u64> = own.iter().map(|o| o.as_ref().map_or(0, |(_, b)| *b)).collect();
                // Compat mode moves each byte of a path's POSIX I/O through a
                // bounce buffer with one copy: where every carrier's own I/O
                // is known, the window's copies are theirs in proportion to it.
                let io_sum: u64 = own_io.iter().sum();
                let split = own_io.iter().all(|b| *b > 0) && w.host_copy_bytes > 0;
                for ((&i, &io), file) in many.iter().zip(&own_io).zip(&own) {
                    let e = &mut out[i];
                    e.carried += 1;
                    e.shared_host += host_of(w);
                    e.nvfs_ioctls += w.nvfs_ioctls;
                    if split {
                        e.host_copy += (w.host_copy_bytes as u128 * io as u128 / io_sum as u128) as u64;
                    }
                    if let Some((k, b)) = file.as_ref().filter(|(_, b)| *b > 0) {
                        *e.file_io.entry(k.clone()).or_default() += b;
                    }
                }
            }
        }
    }
    out
}

fn judge(
    c: Candidate,
    e: &Evidence,
    g: &GdsProcess,
    p: &ProcessIn,
    facts: Option<&HostFacts>,
    has_windows: bool,
) -> Path {
    let mut path = c.path;
    let big = |v: u64| v > 0 && v as f64 >= SHARE * path.bytes.max(1) as f64;
    let verb = if path.op == OpClass::FileWrite {
        "written"
    } else {
        "read"
    };
    let posix = if path.op == OpClass::FileWrite {
        "pwrite"
    } else {
        "pread"
    };
    // The file: its handle's, else the one file whose I/O ran in its time.
    let mut key = c.file.clone();
    if key.is_none()
        && let [(k, _)] = e.file_io.iter().filter(|(_, b)| **b > 0).collect::<Vec<_>>().as_slice()
    {
        key = Some((*k).clone());
        path.peer = g.file(k).map_or_else(|| (*k).clone(), FileIo::name);
        path.evidence.push(format!(
            "its handle was registered before tracing began; the I/O in its time was all on {}",
            path.peer
        ));
    }
    let file = key.as_deref().and_then(|k| g.file(k));
    let file_io = match &key {
        Some(k) => e.file_io.get(k).copied().unwrap_or(0),
        None => e.file_io.values().sum(),
    };
    path.basis = if c.file.is_some() {
        Basis::SetUp
    } else {
        Basis::SteadyState
    };
    path.host_bytes = e.host_copy.max(e.socket).max(file_io);
    path.device_bytes = e.device_copy;
    path.shared_host_bytes = e.shared_host;
    path.evidence.insert(0, calls_line(&path, verb, file));
    if has_windows && e.carried == 0 {
        path.mark_beside();
        return path;
    }
    // nvidia-fs ioctls in its time, or in the process's with no file I/O of its own.
    let nvfs = e.nvfs_ioctls > 0 || (g.files.iter().any(|f| f.nvfs() && f.ioctls > 0) && !big(file_io));
    let p2pdma_on = g.config.as_ref().and_then(|c| c.use_pci_p2pdma) == Some(true) || g.p2pdma_maps > 0;
    // A buffer allocated before tracing began has memory `unknown`; copies
    // between GPU and host memory in its path's time carried its bytes, so
    // they were GPU memory's, staged through host buffers.
    let copied_unknown = path.memory == "unknown" && big(e.host_copy);
    let gpu = path.memory == "cuda" || copied_unknown;
    if copied_unknown {
        path.evidence.push(
            "its buffer's memory was not seen (allocated before tracing began); the copies between GPU and host memory in its time carried its bytes"
                .to_string(),
        );
    }
    if big(e.host_copy) || (big(file_io) && !gpu) {
        // Through host memory: the bounce buffers' copies, with the file's
        // POSIX I/O (or POSIX I/O on a host buffer).
        path.via = Via::Compat.name().into();
        path.transport = if gpu {
            Transport::HostStaged
        } else {
            Transport::HostOnly
        };
        path.host_staged = gpu;
        path.staged_bytes = if !gpu {
            0
        } else if file_io > 0 {
            file_io
        } else {
            e.host_copy
        };
        if file_io > 0 {
            path.evidence.push(format!(
                "{file_io} bytes {verb} with {posix} (POSIX I/O into host memory) in its time"
            ));
        } else {
            path.evidence.push(
                "no positional file I/O of the file seen in its time (probes unavailable, or another kind of I/O)"
                    .to_string(),
            );
        }
        if e.host_copy > 0 {
            path.evidence.push(format!(
                "{} bytes copied between GPU and host memory in its time (cuMemcpy*: the bounce buffers)",
                e.host_copy
            ));
        }
        if g.bounce_buffers > 0 {
            path.evidence.push(format!(
                "{} pinned host buffers registered (cuMemHostRegister, {} bytes): cuFile's bounce buffers",
                g.bounce_buffers, g.bounce_bytes
            ));
        }
        if gpu {
            let (_, sentence) = compat_cause(g, file, p, facts, &c.samples, path.op == OpClass::FileWrite);
            path.cause = Some(sentence);
        }
        return path;
    }
    if nvfs {
        path.via = Via::Nvfs.name().into();
        path.transport = Transport::GpuDirectStorage;
        path.evidence.push(format!(
            "{} nvidia-fs ioctls in its time{}; no copies through host memory and no POSIX I/O of the file",
            e.nvfs_ioctls,
            g.files
                .iter()
                .find(|f| f.nvfs())
                .map_or(String::new(), |f| format!(" ({})", f.name()))
        ));
    } else if big(file_io) && gpu && p2pdma_on {
        path.via = Via::P2pdma.name().into();
        path.transport = Transport::GpuDirectStorage;
        path.evidence.push(format!(
            "{file_io} bytes {verb} with {posix} straight into GPU memory (no copies through host memory) with P2PDMA{}",
            if g.p2pdma_maps > 0 {
                format!(": {} PCI P2PDMA mappings", g.p2pdma_maps)
            } else {
                " enabled in cufile.json (use_pci_p2pdma)".into()
            }
        ));
    } else if big(file_io) && gpu {
        path.transport = Transport::Ambiguous;
        path.evidence.push(format!(
            "{file_io} bytes {verb} with {posix} on GPU memory but no copies through host memory and P2PDMA is neither enabled (cufile.json) nor seen mapping pages: P2PDMA, or copies the probes did not see"
        ));
        return path;
    } else {
        path.evidence.push(
            "no nvidia-fs ioctl, POSIX I/O of the file or copy through host memory was seen in its time: where its bytes went is not known".into(),
        );
        return path;
    }
    // Direct: unless host bytes of its shared windows could be its own.
    if big(e.shared_host) {
        path.evidence.push(format!(
            "but {} bytes went through host memory while it and other paths of the process ran: its bytes did not all stay out of host memory",
            e.shared_host
        ));
        path.transport = Transport::Ambiguous;
        return path;
    }
    if big(e.device_copy) && !c.samples.iter().any(|s| s.registered || g.registered(s.buffer)) {
        path.cause = Some(format!(
            "{}: {} bytes copied device to device in its time: cuFile moved the data through its own registered GPU buffer. Register the buffer once (cuFileBufRegister) to let the DMA reach it",
            Cause::BufferNotRegistered.opening(),
            e.device_copy
        ));
    }
    path
}

/// The path's own line: its calls, bytes and the file behind them.
fn calls_line(path: &Path, verb: &str, file: Option<&FileIo>) -> String {
    let what = file.and_then(|f| f.file.as_ref()).map_or(String::new(), |f| {
        format!(
            " ({} on {}, {}opened O_DIRECT)",
            f.fs_type,
            f.mount_source,
            if f.o_direct() { "" } else { "not " }
        )
    });
    format!(
        "{} cuFile calls, {} bytes {verb}, on {}{what}",
        path.calls, path.bytes, path.peer
    )
}

fn truthy(v: &str) -> bool {
    matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
}

/// Why a file's I/O ran in compat mode: the first cause that holds, in
/// the order cuFile decides (the process forces it; the driver has no
/// nvidia-fs; the file, its filesystem or device exclude it; the I/O is
/// too small or unaligned; the PCIe path blocks P2P).
pub fn compat_cause(
    g: &GdsProcess,
    file: Option<&FileIo>,
    p: &ProcessIn,
    facts: Option<&HostFacts>,
    samples: &[IoSample],
    write: bool,
) -> (Cause, String) {
    let env = |k: &str| p.env.get(k).or_else(|| g.env.get(k)).map(String::as_str);
    if let Some(v) = env("CUFILE_FORCE_COMPAT_MODE").filter(|v| truthy(v)) {
        return (
            Cause::ForcedCompat,
            format!(
                "{}={v} in the process environment: cuFile runs every I/O in compat mode, POSIX I/O through host bounce buffers. Unset it",
                Cause::ForcedCompat.opening()
            ),
        );
    }
    let config = g.config.as_ref();
    let p2pdma = config.and_then(|c| c.use_pci_p2pdma) == Some(true);
    if let Some(h) = facts.and_then(|f| f.gds.as_ref())
        && !h.present()
        && !p2pdma
    {
        return (
            Cause::NvfsNotLoaded,
            format!(
                "{} (no nvidia_fs in /proc/modules, no /dev/nvidia-fs*) and P2PDMA not enabled (cufile.json use_pci_p2pdma): cuFile's driver runs in compat mode, POSIX I/O through host bounce buffers and copies. Install and load nvidia-fs (modprobe nvidia-fs), or on a kernel with PCI P2PDMA set properties.use_pci_p2pdma",
                Cause::NvfsNotLoaded.opening()
            ),
        );
    }
    let of = file.and_then(|f| f.file.as_ref());
    if let Some(f) = of
        && !f.o_direct()
    {
        return (
            Cause::NotODirect,
            format!(
                "{} ({}, flags {:#o}): cuFile reads and writes it with buffered POSIX I/O through the page cache. Open it with O_DIRECT",
                Cause::NotODirect.opening(),
                f.path,
                f.flags
            ),
        );
    }
    if let (Some(f), Some(c)) = (of, config) {
        let listed = |k: &str, v: &str| c.denylist.get(k).is_some_and(|l| l.iter().any(|x| x == v));
        let hit = [
            ("mounts", f.mount_point.as_str()),
            ("filesystems", f.fs_type.as_str()),
            ("devices", f.mount_source.as_str()),
        ]
        .into_iter()
        .find(|(k, v)| listed(k, v));
        if let Some((k, v)) = hit {
            return (
                Cause::Denylisted,
                format!(
                    "{} ({k}: {v} in {}): cuFile uses POSIX I/O there. Remove it from the list if GDS should be used",
                    Cause::Denylisted.opening(),
                    c.path
                ),
            );
        }
    }
    if let Some(f) = of {
        let local = LOCAL_FS.contains(&f.fs_type.as_str());
        let nvme = f.mount_source.starts_with("/dev/nvme") || f.mount_source.starts_with("/dev/md");
        let ordered = f.fs_type != "ext4" || f.mount_options.contains("data=ordered");
        let why = if !local && !DISTRIBUTED_FS.contains(&f.fs_type.as_str()) {
            Some(format!("{} is not a filesystem GDS supports", f.fs_type))
        } else if local && !nvme {
            Some(format!("{} on {}, not an NVMe device", f.fs_type, f.mount_source))
        } else if !ordered {
            Some(format!("ext4 mounted without data=ordered ({})", f.mount_options))
        } else {
            None
        };
        if let Some(why) = why {
            return (
                Cause::FsUnsupported,
                format!(
                    "{} ({why}, {}): GDS needs ext4 (data=ordered) or xfs on NVMe or NVMe-oF, or a distributed filesystem with GDS support (NFS over RDMA, Lustre, GPFS, WekaFS, BeeGFS); elsewhere cuFile uses POSIX I/O",
                    Cause::FsUnsupported.opening(),
                    f.path
                ),
            );
        }
    }
    let min_kb = of.and_then(|f| config.and_then(|c| c.posix_gds_min_kb.get(&f.fs_type).copied()));
    let unaligned_writes = config.and_then(|c| c.posix_unaligned_writes) != Some(false);
    for s in samples {
        let small = matches!((s.size, min_kb), (Some(n), Some(kb)) if n < kb * 1024);
        let unaligned = [s.size, s.file_offset.map(|o| o as u64)]
            .into_iter()
            .flatten()
            .any(|v| v % BLOCK != 0);
        if small || (unaligned && (!write || unaligned_writes)) {
            return (
                Cause::SmallOrUnaligned,
                format!(
                    "{} (a call of {} bytes at file offset {}{}): cuFile sends such I/O through POSIX. Use I/O of 4 KiB multiples at aligned offsets{}",
                    Cause::SmallOrUnaligned.opening(),
                    s.size.map_or("?".into(), |n| n.to_string()),
                    s.file_offset.map_or("?".into(), |o| o.to_string()),
                    min_kb.map_or(String::new(), |kb| format!(", posix_gds_min_kb {kb}")),
                    if small { ", above posix_gds_min_kb" } else { "" }
                ),
            );
        }
    }
    if let Some(f) = facts {
        let passthrough = f
            .iommu
            .cmdline
            .iter()
            .any(|c| c.ends_with("=pt") || c.ends_with("=off"));
        let iommu = f.iommu.groups > 0 && !passthrough;
        if iommu || !f.acs_redirect.is_empty() {
            let mut why = Vec::new();
            if iommu {
                why.push(format!("{} IOMMU groups, no iommu=pt", f.iommu.groups));
            }
            if !f.acs_redirect.is_empty() {
                why.push(format!("ACS redirect on {}", f.acs_redirect.join(", ")));
            }
            return (
                Cause::P2pBlocked,
                format!(
                    "{} ({}): nvidia-fs cannot DMA between the NVMe device and the GPU, and cuFile falls back to compat mode. Use iommu=pt and disable ACS redirect on the bridges between them",
                    Cause::P2pBlocked.opening(),
                    why.join("; ")
                ),
            );
        }
    }
    (
        Cause::Undetermined,
        format!(
            "{}: no variable, configuration, file, filesystem or I/O shape seen here explains it; cuFile's log (cufile.log, explain --cufile-log) says why",
            Cause::Undetermined.opening()
        ),
    )
}

#[cfg(test)]
mod tests;
