//! `gdrtrace drive cuda-copy`: CUDA memory copies the tracer runs and
//! observes. Host-to-device and device-to-host from pinned
//! (`cuMemHostAlloc`) and pageable (`Vec`) host memory, device-to-device,
//! and GPU-to-GPU both with peer access (`cuCtxEnablePeerAccess` +
//! `cuMemcpyPeer`) and without it (staged explicitly through a pinned host
//! buffer: `cuMemcpyDtoH` on one device, then `cuMemcpyHtoD` on the other).
//!
//! Every copy is one synchronous driver call whose exported symbol is known
//! (`cuMemcpyHtoD_v2`, ...), and the report counts them per symbol, so the
//! tracer can be held to exact call counts and byte totals.
pub mod cu;

use std::{collections::BTreeMap, path::PathBuf, time::Instant};

use cudarc::driver::sys;
use serde::{Deserialize, Serialize};

use cu::{CuError, Device, DeviceBuf, PinnedBuf, check};

/// Default sizes of the sweep.
pub const DEFAULT_COPY_SIZES: &str = "4K,64K,1M,16M,256M";

/// Bytes the default iteration count aims at per (case, size).
const TARGET_BYTES_PER_SIZE: u64 = 1 << 30;
const MIN_DEFAULT_ITERS: u64 = 4;
const MAX_DEFAULT_ITERS: u64 = 2000;

/// Errors of `drive cuda-copy`, one line each.
#[derive(Debug, thiserror::Error)]
pub enum CudaCopyError {
    #[error(transparent)]
    Cuda(#[from] CuError),
    #[error("cuda-copy: {0}")]
    Usage(String),
    #[error("cuda-copy: case {case} size {size}: {source}")]
    Copy {
        case: CopyCase,
        size: u64,
        #[source]
        source: CuError,
    },
}

use crate::units::{SizeList, parse_sizes};

/// Timed copies per size when `--iters` is not given: about 1 GiB per
/// size, at least 4 and at most 2000 copies.
pub fn default_iters(size: u64) -> u64 {
    (TARGET_BYTES_PER_SIZE / size.max(1)).clamp(MIN_DEFAULT_ITERS, MAX_DEFAULT_ITERS)
}

/// One kind of copy.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CopyCase {
    /// Pinned host -> device (cuMemcpyHtoD_v2).
    H2dPinned,
    /// Device -> pinned host (cuMemcpyDtoH_v2).
    D2hPinned,
    /// Pageable host -> device (cuMemcpyHtoD_v2).
    H2dPageable,
    /// Device -> pageable host (cuMemcpyDtoH_v2).
    D2hPageable,
    /// Device -> same device (cuMemcpyDtoD_v2).
    D2d,
    /// GPU -> other GPU staged through pinned host memory, no peer access
    /// (cuMemcpyDtoH_v2 then cuMemcpyHtoD_v2).
    G2gStaged,
    /// GPU -> other GPU with peer access enabled (cuMemcpyPeer).
    G2gPeer,
}

impl CopyCase {
    pub const ALL: [CopyCase; 7] = [
        CopyCase::H2dPinned,
        CopyCase::D2hPinned,
        CopyCase::H2dPageable,
        CopyCase::D2hPageable,
        CopyCase::D2d,
        CopyCase::G2gStaged,
        CopyCase::G2gPeer,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CopyCase::H2dPinned => "h2d-pinned",
            CopyCase::D2hPinned => "d2h-pinned",
            CopyCase::H2dPageable => "h2d-pageable",
            CopyCase::D2hPageable => "d2h-pageable",
            CopyCase::D2d => "d2d",
            CopyCase::G2gStaged => "g2g-staged",
            CopyCase::G2gPeer => "g2g-peer",
        }
    }

    pub fn needs_two_gpus(self) -> bool {
        matches!(self, CopyCase::G2gStaged | CopyCase::G2gPeer)
    }
}

impl std::fmt::Display for CopyCase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Options of `gdrtrace drive cuda-copy`.
#[derive(clap::Args, Clone, Debug)]
pub struct CudaCopyOpts {
    /// Copy kinds to run, comma-separated (default: all). GPU->GPU kinds need
    /// two GPUs and are skipped with a note otherwise.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "CASE,...")]
    pub cases: Vec<CopyCase>,
    /// Copy sizes, comma-separated; K, M and G are powers of 1024.
    #[arg(long, value_name = "SIZE,...", value_parser = parse_sizes, default_value = DEFAULT_COPY_SIZES)]
    pub sizes: SizeList,
    /// Timed copies per (case, size) (default: about 1 GiB per size, 4 to 2000).
    #[arg(long, value_name = "N")]
    pub iters: Option<u64>,
    /// Untimed copies per (case, size) before timing (counted in calls).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub warmup: u64,
    /// GPU of the single-GPU cases and source of the GPU->GPU cases.
    #[arg(long, value_name = "ORDINAL", default_value_t = 0)]
    pub device: usize,
    /// Destination GPU of the GPU->GPU cases (default: the next ordinal).
    #[arg(long, value_name = "ORDINAL")]
    pub peer: Option<usize>,
    /// Also write the report as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
}

impl Default for CudaCopyOpts {
    fn default() -> Self {
        Self {
            cases: Vec::new(),
            sizes: parse_sizes(DEFAULT_COPY_SIZES).unwrap_or(SizeList(vec![4096])),
            iters: None,
            warmup: 1,
            device: 0,
            peer: None,
            summary: None,
        }
    }
}

/// One (case, size) of the sweep.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CopyResult {
    pub case: CopyCase,
    /// Bytes per copy.
    pub size: u64,
    pub warmup: u64,
    /// Timed copies.
    pub iters: u64,
    /// cuMemcpy* calls made for this (case, size), warm-up included.
    pub calls: u64,
    /// The same, per exported libcuda symbol.
    pub calls_by_function: BTreeMap<String, u64>,
    /// Sum of the ByteCount arguments of those calls.
    pub call_bytes: u64,
    /// Bytes moved source -> destination in the timed copies (size * iters).
    pub moved_bytes: u64,
    pub time_s: f64,
    /// moved_bytes / time_s, in GB/s (1e9 bytes).
    pub gbps: f64,
    /// Process CPU time (user + system) over the timed copies.
    pub cpu_s: f64,
    pub cpu_s_per_gb: f64,
    pub src_device: Option<usize>,
    pub dst_device: Option<usize>,
    /// Source, destination and (staged case) bounce-buffer addresses.
    pub src_addr: u64,
    pub dst_addr: u64,
    pub staging_addr: Option<u64>,
}

impl CopyResult {
    pub fn line(&self) -> String {
        let by_fn: Vec<String> = self.calls_by_function.iter().map(|(k, v)| format!("{k}:{v}")).collect();
        format!(
            "cuda-copy: case={} size={} iters={} calls={} by_fn={} call_bytes={} moved={} time_ms={:.3} gbps={:.3} cpu_ms={:.3} cpu_ms_per_gb={:.3}",
            self.case,
            self.size,
            self.iters,
            self.calls,
            by_fn.join(","),
            self.call_bytes,
            self.moved_bytes,
            self.time_s * 1e3,
            self.gbps,
            self.cpu_s * 1e3,
            self.cpu_s_per_gb * 1e3,
        )
    }
}

/// The whole run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CudaCopyReport {
    pub pid: u32,
    pub driver_version: i32,
    /// Visible CUDA devices.
    pub devices: usize,
    pub device: usize,
    pub device_name: String,
    pub peer: Option<usize>,
    pub peer_name: Option<String>,
    /// Whether device and peer can access each other (cuDeviceCanAccessPeer,
    /// both directions); None with one GPU.
    pub peer_access_supported: Option<bool>,
    /// Cases run (each over every size).
    pub cases: Vec<CopyCase>,
    /// cuMemcpy* calls in all, warm-up included.
    pub calls: u64,
    pub calls_by_function: BTreeMap<String, u64>,
    /// Sum of the ByteCount arguments of all cuMemcpy* calls.
    pub bytes: u64,
    pub results: Vec<CopyResult>,
    /// Why cases were left out (`skipping: needs 2 GPUs ...`).
    pub skipped: Vec<String>,
    pub elapsed_s: f64,
}

impl CudaCopyReport {
    /// The first line is `cuda-copy: devices=N cases=K calls=C bytes=B`;
    /// then one line per (case, size), then notes.
    pub fn summary_lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "cuda-copy: devices={} cases={} calls={} bytes={}",
            self.devices,
            self.cases.len(),
            self.calls,
            self.bytes
        )];
        out.extend(self.results.iter().map(CopyResult::line));
        for s in &self.skipped {
            out.push(format!("cuda-copy: {s}"));
        }
        let by_fn: Vec<String> = self.calls_by_function.iter().map(|(k, v)| format!("{k}={v}")).collect();
        out.push(format!("cuda-copy: calls by function: {}", by_fn.join(" ")));
        let peer = match (&self.peer, &self.peer_name) {
            (Some(p), Some(n)) => format!(
                " peer={p} ({n}) peer_access={}",
                match self.peer_access_supported {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "unknown",
                }
            ),
            _ => String::new(),
        };
        out.push(format!(
            "cuda-copy: pid={} driver={} device={} ({}){peer} elapsed_s={:.3}",
            self.pid, self.driver_version, self.device, self.device_name, self.elapsed_s
        ));
        out
    }
}

/// Buffers of one run, each `max` bytes. Field order matters: buffers drop
/// before the devices whose contexts own them.
struct Buffers {
    src0: DeviceBuf,
    dst0: DeviceBuf,
    dst1: Option<DeviceBuf>,
    pinned: PinnedBuf,
    pageable: PageableBuf,
}

/// Ordinary (pageable) host memory, touched so its pages exist; a raw
/// allocation so the device may write it through a pointer.
struct PageableBuf {
    ptr: *mut u8,
    len: usize,
}

impl PageableBuf {
    fn new(len: usize, byte: u8) -> Self {
        let b: Box<[u8]> = vec![byte; len].into_boxed_slice();
        PageableBuf {
            ptr: Box::into_raw(b).cast::<u8>(),
            len,
        }
    }
}

impl Drop for PageableBuf {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` came from Box::into_raw of a boxed slice of
        // exactly `len` bytes, and are released once.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr, self.len)) });
    }
}

struct Devices {
    dev: Device,
    peer: Option<Device>,
}

impl Devices {
    fn synchronize(&self) -> Result<(), CuError> {
        if let Some(p) = &self.peer {
            p.synchronize()?;
        }
        self.dev.synchronize()
    }
}

/// Runs the sweep. Fails cleanly (no panic) without libcuda or a GPU.
pub fn run(opts: &CudaCopyOpts) -> Result<CudaCopyReport, CudaCopyError> {
    let started = Instant::now();
    if opts.iters == Some(0) {
        return Err(CudaCopyError::Usage("--iters must be at least 1".into()));
    }
    let max = usize::try_from(opts.sizes.0.iter().copied().max().unwrap_or(0))
        .map_err(|_| CudaCopyError::Usage("size too large for this machine".into()))?;
    if max == 0 {
        return Err(CudaCopyError::Usage("--sizes: need at least one size".into()));
    }
    let mut wanted: Vec<CopyCase> = if opts.cases.is_empty() {
        CopyCase::ALL.to_vec()
    } else {
        opts.cases.clone()
    };
    wanted.sort();
    wanted.dedup();

    cu::init()?;
    let driver_version = cu::driver_version()?;
    let count = cu::device_count()?;
    if count == 0 {
        return Err(CuError::NoDevice.into());
    }
    if opts.device >= count {
        return Err(CudaCopyError::Usage(format!(
            "--device {} out of range ({count} device(s))",
            opts.device
        )));
    }
    let peer_ordinal = match opts.peer {
        Some(p) if p >= count || p == opts.device => {
            return Err(CudaCopyError::Usage(format!(
                "--peer {p} must be another device than --device {} (of {count})",
                opts.device
            )));
        }
        Some(p) => Some(p),
        None if count >= 2 => Some((opts.device + 1) % count),
        None => None,
    };

    let mut skipped = Vec::new();
    let two_gpu: Vec<CopyCase> = wanted.iter().copied().filter(|c| c.needs_two_gpus()).collect();
    if peer_ordinal.is_none() && !two_gpu.is_empty() {
        let names: Vec<&str> = two_gpu.iter().map(|c| c.name()).collect();
        skipped.push(format!(
            "skipping: needs 2 GPUs ({}; found {count} device)",
            names.join(", ")
        ));
        wanted.retain(|c| !c.needs_two_gpus());
    }

    let devs = Devices {
        dev: Device::open(opts.device)?,
        peer: peer_ordinal.map(Device::open).transpose()?,
    };
    let peer_access_supported = match &devs.peer {
        Some(p) => Some(cu::can_access_peer(&devs.dev, p)? && cu::can_access_peer(p, &devs.dev)?),
        None => None,
    };
    if peer_access_supported == Some(false) && wanted.contains(&CopyCase::G2gPeer) {
        skipped.push(format!(
            "skipping: g2g-peer: devices {} and {} cannot access each other (cuDeviceCanAccessPeer=0)",
            opts.device,
            peer_ordinal.unwrap_or(0)
        ));
        wanted.retain(|c| *c != CopyCase::G2gPeer);
    }

    devs.dev.make_current()?;
    let bufs = Buffers {
        src0: DeviceBuf::new(&devs.dev, max, 0x5a)?,
        dst0: DeviceBuf::new(&devs.dev, max, 0)?,
        dst1: devs.peer.as_ref().map(|p| DeviceBuf::new(p, max, 0)).transpose()?,
        pinned: PinnedBuf::new(max, 0xa5)?,
        pageable: PageableBuf::new(max, 0xa5),
    };
    devs.dev.make_current()?;

    let mut results = Vec::new();
    let outcome = (|| -> Result<(), CudaCopyError> {
        for &case in &wanted {
            if case == CopyCase::G2gPeer
                && let Some(p) = &devs.peer
            {
                devs.dev.enable_peer_access(p)?;
                p.enable_peer_access(&devs.dev)?;
                devs.dev.make_current()?;
            }
            for &size in &opts.sizes.0 {
                let r = run_case(case, size, opts, &devs, &bufs).map_err(|source| CudaCopyError::Copy {
                    case,
                    size,
                    source,
                })?;
                results.push(r);
            }
            if case == CopyCase::G2gPeer
                && let Some(p) = &devs.peer
            {
                devs.dev.disable_peer_access(p)?;
                p.disable_peer_access(&devs.dev)?;
                devs.dev.make_current()?;
            }
        }
        Ok(())
    })();
    let device_name = devs.dev.name.clone();
    let peer_name = devs.peer.as_ref().map(|p| p.name.clone());
    drop(bufs);
    drop(devs);
    outcome?;

    let mut calls_by_function = BTreeMap::new();
    for r in &results {
        for (k, v) in &r.calls_by_function {
            *calls_by_function.entry(k.clone()).or_insert(0) += v;
        }
    }
    Ok(CudaCopyReport {
        pid: std::process::id(),
        driver_version,
        devices: count,
        device: opts.device,
        device_name,
        peer: peer_ordinal,
        peer_name,
        peer_access_supported,
        cases: wanted,
        calls: results.iter().map(|r| r.calls).sum(),
        calls_by_function,
        bytes: results.iter().map(|r| r.call_bytes).sum(),
        results,
        skipped,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

/// Counts of driver calls made.
#[derive(Default)]
struct Tally {
    by_fn: BTreeMap<String, u64>,
    bytes: u64,
}

impl Tally {
    fn add(&mut self, f: &'static str, bytes: usize) {
        *self.by_fn.entry(f.to_string()).or_insert(0) += 1;
        self.bytes += bytes as u64;
    }
}

fn run_case(
    case: CopyCase,
    size: u64,
    opts: &CudaCopyOpts,
    devs: &Devices,
    bufs: &Buffers,
) -> Result<CopyResult, CuError> {
    let n = usize::try_from(size)
        .unwrap_or(usize::MAX)
        .min(bufs.pinned.len)
        .min(bufs.pageable.len);
    let iters = opts.iters.unwrap_or_else(|| default_iters(size));
    let mut tally = Tally::default();
    devs.dev.make_current()?;
    for _ in 0..opts.warmup {
        copy_once(case, n, devs, bufs, &mut tally)?;
    }
    devs.synchronize()?;
    devs.dev.make_current()?;
    let cpu0 = cu::cpu_time_s();
    let t0 = Instant::now();
    for _ in 0..iters {
        copy_once(case, n, devs, bufs, &mut tally)?;
    }
    devs.synchronize()?;
    let time_s = t0.elapsed().as_secs_f64();
    let cpu_s = (cu::cpu_time_s() - cpu0).max(0.0);
    devs.dev.make_current()?;

    let moved = n as u64 * iters;
    let gb = moved as f64 / 1e9;
    let pageable = bufs.pageable.ptr as u64;
    let pinned = bufs.pinned.ptr as u64;
    let dst1 = bufs.dst1.as_ref().map_or(0, |b| b.ptr);
    let peer = devs.peer.as_ref().map(|p| p.ordinal);
    let d = Some(devs.dev.ordinal);
    let (src_device, dst_device, src_addr, dst_addr, staging_addr) = match case {
        CopyCase::H2dPinned => (None, d, pinned, bufs.dst0.ptr, None),
        CopyCase::D2hPinned => (d, None, bufs.src0.ptr, pinned, None),
        CopyCase::H2dPageable => (None, d, pageable, bufs.dst0.ptr, None),
        CopyCase::D2hPageable => (d, None, bufs.src0.ptr, pageable, None),
        CopyCase::D2d => (d, d, bufs.src0.ptr, bufs.dst0.ptr, None),
        CopyCase::G2gStaged => (d, peer, bufs.src0.ptr, dst1, Some(pinned)),
        CopyCase::G2gPeer => (d, peer, bufs.src0.ptr, dst1, None),
    };
    Ok(CopyResult {
        case,
        size: n as u64,
        warmup: opts.warmup,
        iters,
        calls: tally.by_fn.values().sum(),
        calls_by_function: tally.by_fn,
        call_bytes: tally.bytes,
        moved_bytes: moved,
        time_s,
        gbps: if time_s > 0.0 { gb / time_s } else { 0.0 },
        cpu_s,
        cpu_s_per_gb: if gb > 0.0 { cpu_s / gb } else { 0.0 },
        src_device,
        dst_device,
        src_addr,
        dst_addr,
        staging_addr,
    })
}

/// One copy of `n` bytes: exactly the driver calls the tally records.
/// Expects the source device's context current; leaves it current.
fn copy_once(case: CopyCase, n: usize, devs: &Devices, b: &Buffers, tally: &mut Tally) -> Result<(), CuError> {
    match case {
        CopyCase::H2dPinned => h2d(b.dst0.ptr, b.pinned.ptr, n, tally),
        CopyCase::D2hPinned => d2h(b.pinned.ptr, b.src0.ptr, n, tally),
        CopyCase::H2dPageable => h2d(b.dst0.ptr, b.pageable.ptr.cast_const().cast(), n, tally),
        CopyCase::D2hPageable => d2h(b.pageable.ptr.cast(), b.src0.ptr, n, tally),
        CopyCase::D2d => {
            // CUresult cuMemcpyDtoD(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount);  (exported as _v2)
            // SAFETY: both device buffers hold at least n bytes.
            check("cuMemcpyDtoD", unsafe {
                sys::cuMemcpyDtoD_v2(b.dst0.ptr, b.src0.ptr, n)
            })?;
            tally.add("cuMemcpyDtoD_v2", n);
            Ok(())
        }
        CopyCase::G2gStaged => {
            let (Some(peer), Some(dst1)) = (&devs.peer, &b.dst1) else {
                return Ok(());
            };
            // Leg 1 on the source GPU: device -> pinned host (synchronous,
            // so the bytes are in host memory when it returns).
            d2h(b.pinned.ptr, b.src0.ptr, n, tally)?;
            // Leg 2 on the destination GPU: pinned host -> device.
            peer.make_current()?;
            h2d(dst1.ptr, b.pinned.ptr, n, tally)?;
            devs.dev.make_current()
        }
        CopyCase::G2gPeer => {
            let (Some(peer), Some(dst1)) = (&devs.peer, &b.dst1) else {
                return Ok(());
            };
            // CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext,
            //                       CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount);
            // SAFETY: dst1 lives in the peer's retained context and src0 in
            // the device's; both hold at least n bytes.
            check("cuMemcpyPeer", unsafe {
                sys::cuMemcpyPeer(dst1.ptr, peer.ctx, b.src0.ptr, devs.dev.ctx, n)
            })?;
            tally.add("cuMemcpyPeer", n);
            Ok(())
        }
    }
}

fn h2d(dst: sys::CUdeviceptr, src: *const std::ffi::c_void, n: usize, tally: &mut Tally) -> Result<(), CuError> {
    // CUresult cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);  (exported as _v2)
    // SAFETY: `src` is a live host buffer (pinned or Vec) and `dst` a device
    // buffer, each of at least n bytes.
    check("cuMemcpyHtoD", unsafe { sys::cuMemcpyHtoD_v2(dst, src, n) })?;
    tally.add("cuMemcpyHtoD_v2", n);
    Ok(())
}

fn d2h(dst: *mut std::ffi::c_void, src: sys::CUdeviceptr, n: usize, tally: &mut Tally) -> Result<(), CuError> {
    // CUresult cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);  (exported as _v2)
    // SAFETY: `dst` is a live host buffer (pinned or Vec, not otherwise
    // borrowed during the call) and `src` a device buffer, each of at least
    // n bytes.
    check("cuMemcpyDtoH", unsafe { sys::cuMemcpyDtoH_v2(dst, src, n) })?;
    tally.add("cuMemcpyDtoH_v2", n);
    Ok(())
}

#[cfg(test)]
mod tests;
