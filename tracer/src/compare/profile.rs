//! The hardware/software profile a baseline holds: what must be the same for
//! two runs to be comparable. Kernel, lockdown and the probe matrix come
//! from the report; GPU, NIC, CPU and library versions from the machine
//! (only when the report was made on this kernel) or from the workloads'
//! own summaries.
use std::{collections::BTreeMap, fs, path::Path};

use serde::{Deserialize, Serialize};

use crate::report::Report;

/// One profile. Every `None` is "not known", never "absent".
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Profile {
    pub kernel: String,
    pub lockdown: String,
    pub cpu: Option<String>,
    pub gpu: Option<String>,
    pub gpu_driver: Option<String>,
    pub cuda: Option<String>,
    pub nccl: Option<String>,
    pub libibverbs: Option<String>,
    pub nic: Option<String>,
    pub nic_firmware: Option<String>,
    /// gdrtrace version that made the report.
    pub tool_version: String,
    /// FNV-1a 64 of the probe catalog and the uprobe table of the gdrtrace
    /// that recorded the profile (`catalog_hash`).
    pub probe_catalog: String,
    /// Probe point -> `attached via X` or `unavailable`.
    pub probes: BTreeMap<String, String>,
}

/// One line of a profile difference.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    pub field: String,
    pub baseline: String,
    pub current: String,
    /// True when one side does not know the value (noted, not refused).
    pub unknown: bool,
}

/// FNV-1a 64 over the Debug form of the catalog and the uprobe table: it
/// changes when a probe point, strategy, symbol or argument layout does,
/// not when a comment or formatting does.
pub fn catalog_hash() -> String {
    let text = format!("{:?}{:?}", crate::probes::catalog::CATALOG, crate::probes::uapi::TABLE);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("fnv1a64:{h:016x}")
}

fn read_trim(p: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn cpu_model() -> Option<String> {
    let info = fs::read_to_string("/proc/cpuinfo").ok()?;
    let model = info
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_string())?;
    let n = info.lines().filter(|l| l.starts_with("processor")).count();
    Some(format!("{n}x {model}"))
}

/// GPU models (`2x NVIDIA H200`) and the driver version.
fn gpu() -> (Option<String>, Option<String>) {
    let t = crate::topo::discover();
    let gpu = (!t.gpus.is_empty()).then(|| {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for g in &t.gpus {
            *counts.entry(g.model.as_str()).or_default() += 1;
        }
        counts
            .iter()
            .map(|(m, n)| format!("{n}x {m}"))
            .collect::<Vec<_>>()
            .join(", ")
    });
    // "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ..."
    let driver = read_trim("/proc/driver/nvidia/version").and_then(|v| {
        v.lines()
            .find(|l| l.starts_with("NVRM"))
            .and_then(|l| {
                l.split_whitespace()
                    .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
            })
            .map(str::to_string)
    });
    (gpu, driver)
}

/// RDMA NICs (`mlx5_0: MT4129 (mlx5_core)`) and their firmware versions.
fn nics() -> (Option<String>, Option<String>) {
    let names = crate::topo::dir_names(std::path::Path::new("/sys/class/infiniband"));
    if names.is_empty() {
        return (None, None);
    }
    let mut models = Vec::new();
    let mut fw = Vec::new();
    for n in &names {
        let base = Path::new("/sys/class/infiniband").join(n);
        let driver = fs::read_link(base.join("device/driver"))
            .ok()
            .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()));
        let model = read_trim(base.join("hca_type"))
            .or_else(|| read_trim(base.join("board_id")))
            .or_else(|| read_trim(base.join("parent")).map(|p| format!("software device on {p}")))
            .unwrap_or_else(|| "unknown model".into());
        models.push(match driver {
            Some(d) => format!("{n}: {model} ({d})"),
            None => format!("{n}: {model}"),
        });
        fw.push(format!(
            "{n}: {}",
            read_trim(base.join("fw_ver")).unwrap_or_else(|| "?".into())
        ));
    }
    (Some(models.join(", ")), Some(fw.join(", ")))
}

/// Version of an installed library from its real file name
/// (`libnccl.so.2.28.3` -> `2.28.3`).
fn lib_version(lib: crate::probes::uapi::Lib) -> Option<String> {
    crate::probes::libs::installed()
        .into_iter()
        .filter(|f| f.lib == lib)
        .find_map(|f| {
            let name = Path::new(&f.path).file_name()?.to_string_lossy().into_owned();
            let (_, v) = name.split_once(".so.")?;
            Some(v.to_string())
        })
}

fn cuda_version() -> Option<String> {
    let out = std::process::Command::new("nvidia-smi").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let i = text.find("CUDA Version:")?;
    text[i + "CUDA Version:".len()..]
        .split_whitespace()
        .next()
        .map(str::to_string)
}

/// The probe matrix of a report: point -> how it attached, or `unavailable`.
pub fn probes_of(report: &Report) -> BTreeMap<String, String> {
    report
        .coverage
        .iter()
        .map(|c| {
            let cell = if c.status == crate::probes::Status::Attached {
                format!("attached via {}", c.via.unwrap_or("?"))
            } else {
                "unavailable".to_string()
            };
            (c.point.clone(), cell)
        })
        .collect()
}

/// What a workload summary says about versions: NCCL's own version, the
/// CUDA driver API version, the GPU name.
fn from_summaries(reports: &[Report], p: &mut Profile) {
    for r in reports {
        for w in super::workload::workloads(r) {
            let s = &w.summary;
            if let Some(v) = &s.nccl_version {
                p.nccl = Some(v.clone());
            }
            if let Some(v) = s.driver_version {
                // cuDriverGetVersion: 1000 * major + 10 * minor.
                p.cuda = Some(format!("{}.{}", v / 1000, (v % 1000) / 10));
            }
        }
    }
}

/// The profile of `reports` (one machine's run): kernel, lockdown and probe
/// matrix from the first report; the machine's hardware and libraries only
/// when the report was made on the kernel this machine runs (otherwise the
/// report came from elsewhere and they stay unknown).
pub fn of_reports(reports: &[Report]) -> (Profile, Option<String>) {
    let mut p = Profile {
        probe_catalog: catalog_hash(),
        ..Profile::default()
    };
    if let Some(first) = reports.first() {
        p.kernel = first.host.kernel.clone();
        p.lockdown = first.host.lockdown.clone();
        // Builds of one release compare alike: the revision is build metadata.
        p.tool_version = crate::version::release_of(first.tool_version).to_string();
        p.probes = probes_of(first);
    }
    let here = read_trim("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut note = None;
    if here == p.kernel {
        p.cpu = cpu_model();
        (p.gpu, p.gpu_driver) = gpu();
        (p.nic, p.nic_firmware) = nics();
        use crate::probes::uapi::Lib;
        p.nccl = lib_version(Lib::Nccl);
        p.libibverbs = lib_version(Lib::Ibverbs);
        if p.gpu.is_some() {
            p.cuda = cuda_version();
        }
    } else {
        note = Some(format!(
            "the report was made on kernel {} and this machine runs {here}: CPU, GPU, NIC and library versions are left unknown",
            p.kernel
        ));
    }
    from_summaries(reports, &mut p);
    (p, note)
}

impl Profile {
    /// The comparable fields, in display order.
    pub fn fields(&self) -> Vec<(&'static str, Option<String>)> {
        vec![
            ("kernel", Some(self.kernel.clone()).filter(|s| !s.is_empty())),
            ("lockdown", Some(self.lockdown.clone()).filter(|s| !s.is_empty())),
            ("cpu", self.cpu.clone()),
            ("gpu", self.gpu.clone()),
            ("gpu driver", self.gpu_driver.clone()),
            ("cuda", self.cuda.clone()),
            ("nccl", self.nccl.clone()),
            ("libibverbs", self.libibverbs.clone()),
            ("nic", self.nic.clone()),
            ("nic firmware", self.nic_firmware.clone()),
            ("gdrtrace", Some(self.tool_version.clone()).filter(|s| !s.is_empty())),
            (
                "probe catalog",
                Some(self.probe_catalog.clone()).filter(|s| !s.is_empty()),
            ),
        ]
    }

    /// Every difference between two profiles, probe matrix last.
    pub fn diff(&self, cur: &Profile) -> Vec<Difference> {
        let mut out = Vec::new();
        for ((field, a), (_, b)) in self.fields().into_iter().zip(cur.fields()) {
            match (a, b) {
                (Some(a), Some(b)) if a != b => out.push(Difference {
                    field: field.into(),
                    baseline: a,
                    current: b,
                    unknown: false,
                }),
                (Some(a), None) => out.push(Difference {
                    field: field.into(),
                    baseline: a,
                    current: "unknown".into(),
                    unknown: true,
                }),
                (None, Some(b)) => out.push(Difference {
                    field: field.into(),
                    baseline: "unknown".into(),
                    current: b,
                    unknown: true,
                }),
                _ => {}
            }
        }
        let points: std::collections::BTreeSet<&String> = self.probes.keys().chain(cur.probes.keys()).collect();
        for p in points {
            let a = self.probes.get(p).map_or("absent from catalog", String::as_str);
            let b = cur.probes.get(p).map_or("absent from catalog", String::as_str);
            if a != b {
                out.push(Difference {
                    field: format!("probe {p}"),
                    baseline: a.into(),
                    current: b.into(),
                    unknown: false,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_hash_is_stable_and_shaped() {
        let h = catalog_hash();
        assert_eq!(h, catalog_hash());
        assert!(h.starts_with("fnv1a64:") && h.len() == 8 + 16, "{h}");
    }

    #[test]
    fn diff_lists_fields_and_probes() {
        let mut a = Profile {
            kernel: "6.1.0-37-amd64".into(),
            lockdown: "none".into(),
            gpu: Some("1x NVIDIA H200".into()),
            ..Default::default()
        };
        a.probes
            .insert("ib_umem_get".into(), "attached via fentry/fexit".into());
        let mut b = a.clone();
        b.kernel = "6.12.48-amd64".into();
        b.gpu = None;
        b.probes.insert("ib_umem_get".into(), "unavailable".into());
        let d = a.diff(&b);
        assert_eq!(d[0].field, "kernel");
        assert!(!d[0].unknown);
        assert!(d.iter().any(|x| x.field == "gpu" && x.unknown));
        assert!(
            d.iter()
                .any(|x| x.field == "probe ib_umem_get" && x.current == "unavailable")
        );
        assert!(a.diff(&a).is_empty());
    }
}
