//! `gdrtrace topo` and the live samplers on this host, checked against what
//! the host itself exposes (`/proc/driver/nvidia/gpus`, `/sys/class/infiniband`).
//! No root or BPF needed.
use std::{path::Path, time::Instant};

use gdrtrace::topo;
use integration_tests::{run, stderr, stdout};

/// GPUs the NVIDIA driver lists here (None: no driver).
fn driver_gpus() -> Option<usize> {
    std::fs::read_dir("/proc/driver/nvidia/gpus").ok().map(|d| d.count())
}

fn rdma_devices() -> usize {
    std::fs::read_dir("/sys/class/infiniband").map_or(0, |d| d.count())
}

#[test]
fn topo_text() {
    let o = run(&["topo"]);
    let out = stdout(&o);
    assert!(o.status.success(), "topo failed: {}", stderr(&o));
    let first = out.lines().next().unwrap_or_default();
    match driver_gpus() {
        None => assert!(
            first.starts_with("no GPU: /proc/driver/nvidia/gpus does not exist"),
            "first line: {first}\n{out}"
        ),
        Some(n) => {
            for i in 0..n {
                assert!(out.contains(&format!("GPU{i} ")), "GPU{i} missing:\n{out}");
            }
            if n >= 2 {
                assert!(out.contains("GPU0 <-> GPU1: "), "no GPU pair:\n{out}");
            }
        }
    }
    if rdma_devices() == 0 {
        assert!(out.contains("no RDMA NIC: "), "{out}");
    } else {
        assert!(out.contains("NIC "), "{out}");
    }
    assert!(out.contains("IOMMU: "), "{out}");
    println!("{out}");
}

#[test]
fn topo_json() {
    let o = run(&["topo", "--json"]);
    assert!(o.status.success(), "topo --json failed: {}", stderr(&o));
    let v: topo::TopoDoc = integration_tests::parse_as("topo --json", &stdout(&o));
    let v = &v.topo;
    let gpus = &v.gpus;
    assert_eq!(gpus.len(), driver_gpus().unwrap_or(0), "{v:?}");
    if driver_gpus().is_none() {
        assert!(gpus.is_empty());
        assert!(v.notes.first().is_some_and(|n| n.starts_with("no GPU: ")), "{v:?}");
    }
    assert_eq!(v.nics.len(), rdma_devices(), "{v:?}");
    for g in gpus {
        assert_eq!(g.bus.len(), 12, "{g:?}");
    }
    for l in &v.links {
        assert!(l.observed.is_none(), "{l:?}");
    }
}

#[test]
fn gpu_traffic_sampler() {
    let t0 = Instant::now();
    let first = topo::gpu_traffic();
    let took = t0.elapsed();
    let Some(a) = first else {
        assert!(
            took.as_millis() < 1000,
            "gpu_traffic took {took:?} to say there is no GPU"
        );
        assert!(
            !Path::new("/proc/driver/nvidia/gpus").exists() || driver_gpus() == Some(0),
            "the NVIDIA driver lists GPUs but gpu_traffic() returned None"
        );
        println!("skipping: gpu_traffic_sampler: no NVIDIA driver here (None in {took:?})");
        return;
    };
    assert_eq!(Some(a.len()), driver_gpus(), "{a:?}");
    let b = topo::gpu_traffic().expect("second sample");
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.bus, y.bus);
        if let (Some(p), Some(q)) = (x.nvlink_tx_bytes, y.nvlink_tx_bytes) {
            assert!(q >= p, "NVLink TX went back: {p} -> {q}");
        }
    }
    let c = topo::nvlink_traffic().expect("NVLink-only sample");
    assert!(
        c.iter().all(|g| g.pcie_tx_kbps.is_none() && g.pcie_rx_kbps.is_none()),
        "{c:?}"
    );
    println!("{a:?}\n{b:?}\n{c:?}");
}

#[test]
fn rdma_counter_sampler() {
    let before = topo::rdma_counters();
    let after = topo::rdma_counters();
    if rdma_devices() == 0 {
        assert!(before.is_empty(), "{before:?}");
        println!("skipping: rdma_counter_sampler: no RDMA device here");
        return;
    }
    let d = topo::counter_delta(&before, &after);
    assert!(d.keys().all(|k| k.split('/').count() >= 3), "{d:?}");
    println!("{} counters, delta {d:?}", before.len());
}

/// With `GDRTRACE_EXPECT_NVLINK_TRAFFIC=1` (set on a GPU machine
/// while an NCCL job runs on NVLink-joined GPUs) the NVLink data counters must
/// grow within two seconds.
#[test]
fn nvlink_counters_grow_under_load() {
    if std::env::var_os("GDRTRACE_EXPECT_NVLINK_TRAFFIC").is_none() {
        println!(
            "skipping: nvlink_counters_grow_under_load: no NVLink load announced (GDRTRACE_EXPECT_NVLINK_TRAFFIC)"
        );
        return;
    }
    let sum = |v: &[topo::GpuTraffic]| -> u64 { v.iter().filter_map(|g| g.nvlink_tx_bytes).sum() };
    let a = topo::nvlink_traffic().expect("NVML sample");
    std::thread::sleep(std::time::Duration::from_secs(2));
    let b = topo::nvlink_traffic().expect("NVML sample");
    assert!(sum(&b) > sum(&a), "NVLink TX did not grow under load: {a:?} -> {b:?}");
    println!("NVLink TX over 2 s: {} bytes", sum(&b) - sum(&a));
}
