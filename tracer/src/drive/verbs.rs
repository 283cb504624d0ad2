//! `gdrtrace drive verbs`: an RDMA verbs workload that the tracer runs and
//! observes. It churns memory registrations (`ibv_reg_mr`/`ibv_dereg_mr`) and
//! then performs RDMA WRITEs between two RC queue pairs on one device port
//! (loopback), so that the tracer's captured MRs and transfers can be matched
//! against the exact addresses, lengths and keys recorded in [`VerbsReport`].
//!
//! On a machine without an RDMA NIC, Soft-RoCE provides a device:
//! `modprobe rdma_rxe && rdma link add rxe0 type rxe netdev lo`.

mod ffi;
mod write;

use std::io;
use std::time::Instant;

use rdma_sys as sys;
use serde::{Deserialize, Serialize};

use ffi::{Context, DeviceList, HostBuffer, Mr, Pd};

/// Exported libibverbs symbol used for every registration. With constant
/// access flags lacking IBV_ACCESS_OPTIONAL_RANGE, the C macro `ibv_reg_mr`
/// expands to the inline `__ibv_reg_mr`, which calls this exported function.
pub const REG_SYMBOL: &str = "ibv_reg_mr";

/// Access flags for every MR: LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ.
fn mr_access() -> u32 {
    use sys::ibv_access_flags as A;
    (A::IBV_ACCESS_LOCAL_WRITE | A::IBV_ACCESS_REMOTE_WRITE | A::IBV_ACCESS_REMOTE_READ).0
}

/// Where registered buffers live.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemoryKind {
    /// Page-aligned anonymous host memory.
    #[default]
    Host,
    /// GPU memory registered through a peer-memory client (nvidia_peermem).
    GpuPeerMem,
    /// GPU memory exported as a dma-buf (ibv_reg_dmabuf_mr).
    GpuDmabuf,
}

/// Options of `gdrtrace drive verbs`.
#[derive(clap::Args, Clone, Debug)]
pub struct VerbsOpts {
    /// RDMA device to open (default: the first one listed).
    #[arg(long, value_name = "NAME")]
    pub device: Option<String>,
    /// Number of register/deregister cycles.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub registrations: usize,
    /// Pages per registered buffer.
    #[arg(long, value_name = "M", default_value_t = 16)]
    pub pages: usize,
    /// Bytes per RDMA WRITE (at most pages * page size).
    #[arg(long, value_name = "BYTES", default_value_t = 65536)]
    pub write_size: usize,
    /// Number of RDMA WRITEs (0 skips the QP phase).
    #[arg(long, value_name = "K", default_value_t = 16)]
    pub writes: usize,
    /// Memory to register.
    #[arg(long, value_enum, default_value_t = MemoryKind::Host)]
    pub memory: MemoryKind,
    /// Also write the full report (every MR's addr, length, lkey, rkey) as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub summary: Option<std::path::PathBuf>,
}

impl std::fmt::Display for MemoryKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Host => "host",
            Self::GpuPeerMem => "gpu-peer-mem",
            Self::GpuDmabuf => "gpu-dmabuf",
        })
    }
}

impl Default for VerbsOpts {
    fn default() -> Self {
        Self {
            device: None,
            registrations: 64,
            pages: 16,
            write_size: 65536,
            writes: 16,
            memory: MemoryKind::Host,
            summary: None,
        }
    }
}

/// One memory registration, as the tracer should see it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MrRecord {
    pub addr: u64,
    pub length: u64,
    pub lkey: u32,
    pub rkey: u32,
    pub reg_ns: u64,
    pub dereg_ns: u64,
}

/// Latency distribution in nanoseconds (all zero when `count` is 0).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: usize,
    pub min_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub mean_ns: u64,
}

impl LatencySummary {
    pub fn from_samples(samples: &[u64]) -> Self {
        let mut s = samples.to_vec();
        s.sort_unstable();
        let (Some(&min_ns), Some(&max_ns)) = (s.first(), s.last()) else {
            return Self::default();
        };
        let pct = |p: usize| s[((s.len() - 1) * p).div_ceil(100)];
        let sum: u128 = s.iter().map(|&v| u128::from(v)).sum();
        Self {
            count: s.len(),
            min_ns,
            p50_ns: pct(50),
            p99_ns: pct(99),
            max_ns,
            mean_ns: u64::try_from(sum / s.len() as u128).unwrap_or(u64::MAX),
        }
    }
}

/// Result of the RDMA WRITE phase.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WriteReport {
    /// Completed (signalled, successful) RDMA WRITEs.
    pub count: usize,
    pub bytes_per_write: usize,
    pub total_bytes: u64,
    /// Destination equals the source pattern where written and is zero elsewhere.
    pub verified: bool,
    /// First differing byte offset in the destination buffer, if any.
    pub first_mismatch: Option<usize>,
    /// From the first post to the last completion.
    pub elapsed_ns: u64,
    pub bandwidth_bytes_per_sec: f64,
    /// Post-to-completion latency of each write (one in flight at a time).
    pub latency: LatencySummary,
    pub path_mtu: u32,
    pub src_mr: MrRecord,
    pub dst_mr: MrRecord,
}

/// Everything `drive verbs` did, for matching against the trace (its
/// `--summary`, read back by `validate`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VerbsReport {
    pub device: String,
    pub transport: String,
    pub link_layer: String,
    pub port: u8,
    pub memory: MemoryKind,
    /// libibverbs symbol called for every registration.
    #[serde(deserialize_with = "crate::intern::str")]
    pub reg_symbol: crate::intern::Name,
    pub registrations: usize,
    pub deregistrations: usize,
    pub pages_per_registration: usize,
    pub page_size: usize,
    /// Pages registered by the churn phase (the two write buffers excluded).
    pub total_pages_registered: usize,
    pub reg_latency: LatencySummary,
    pub dereg_latency: LatencySummary,
    /// Churn registrations, in order.
    pub mrs: Vec<MrRecord>,
    /// None when `--writes 0`.
    pub writes: Option<WriteReport>,
    /// QP numbers of the writer (A) and the target (B); None when `--writes 0`.
    pub qp_nums: Option<[u32; 2]>,
    /// GID index used in the address vector; None on an InfiniBand link
    /// layer (addressed by LID) or when `--writes 0`.
    pub gid_index: Option<u8>,
    /// That GID, in IPv6 notation.
    pub gid: Option<String>,
}

impl VerbsReport {
    /// Short human summary; the first line is stable and machine-parsable.
    pub fn summary_lines(&self) -> Vec<String> {
        let (count, verified) = self.writes.as_ref().map_or((0, false), |w| (w.count, w.verified));
        let mut lines = vec![
            format!(
                "verbs: registrations={} deregistrations={} pages_per_registration={} page_size={} writes={} verified={}",
                self.registrations, self.deregistrations, self.pages_per_registration, self.page_size, count, verified
            ),
            format!(
                "verbs: device={} transport={} link_layer={} port={} reg_symbol={} memory={}",
                self.device, self.transport, self.link_layer, self.port, self.reg_symbol, self.memory
            ),
            format!(
                "verbs: reg_ns min={} p50={} max={}; dereg_ns min={} p50={} max={}",
                self.reg_latency.min_ns,
                self.reg_latency.p50_ns,
                self.reg_latency.max_ns,
                self.dereg_latency.min_ns,
                self.dereg_latency.p50_ns,
                self.dereg_latency.max_ns
            ),
        ];
        if let (Some(w), Some([qp_a, qp_b])) = (&self.writes, self.qp_nums) {
            let gid = self.gid_index.map_or_else(|| "none".to_owned(), |g| g.to_string());
            lines.push(format!(
                "verbs: qps={},{} gid_index={} write_size={} elapsed_us={} bandwidth_MiB/s={:.1} write_latency_us p50={:.1} max={:.1}",
                qp_a,
                qp_b,
                gid,
                w.bytes_per_write,
                w.elapsed_ns / 1000,
                w.bandwidth_bytes_per_sec / (1024.0 * 1024.0),
                w.latency.p50_ns as f64 / 1000.0,
                w.latency.max_ns as f64 / 1000.0
            ));
        }
        lines
    }
}

/// Failures of `drive verbs`. Each renders as one line.
#[derive(thiserror::Error, Debug)]
pub enum VerbsError {
    #[error(
        "no RDMA verbs device found (ibv_get_device_list returned 0 devices; on a machine without a NIC load Soft-RoCE: modprobe rdma_rxe && rdma link add rxe0 type rxe netdev lo)"
    )]
    NoDevice,
    #[error("RDMA device {wanted:?} not found; devices present: {present}")]
    DeviceNotFound { wanted: String, present: String },
    #[error("--memory {0}: not built for GPU memory yet (only --memory host is implemented)")]
    MemoryNotBuilt(MemoryKind),
    #[error("invalid options: {0}")]
    InvalidOptions(String),
    #[error("{call} failed: {source}")]
    Call {
        call: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("{call} failed for {what} ({length} bytes at {addr:#x}): {source}; likely cause: {hint}")]
    Registration {
        call: &'static str,
        what: String,
        addr: u64,
        length: usize,
        #[source]
        source: io::Error,
        hint: &'static str,
    },
    #[error("port {port} of {device} is not active (state {state}); the RDMA WRITE phase needs an active port")]
    PortNotActive { device: String, port: u8, state: String },
    #[error("no usable GID on port {port} of {device} (GID table of {entries} entries has no non-zero GID)")]
    NoGid { device: String, port: u8, entries: i32 },
    #[error("RDMA WRITE timed out after {timeout_ms} ms: {completed} of {expected} writes completed")]
    Timeout {
        timeout_ms: u64,
        completed: usize,
        expected: usize,
    },
    #[error("RDMA WRITE {index} completed with status {status} ({status_str}), vendor_err {vendor_err:#x}")]
    WorkCompletion {
        index: u64,
        status: u32,
        status_str: String,
        vendor_err: u32,
    },
}

impl VerbsError {
    fn call(call: &'static str) -> impl FnOnce(io::Error) -> Self {
        move |source| Self::Call { call, source }
    }
}

/// One-line likely cause for a failed registration.
pub fn reg_failure_hint(memory: MemoryKind, err: &io::Error) -> &'static str {
    match (memory, err.raw_os_error()) {
        (MemoryKind::GpuPeerMem, Some(libc::EFAULT)) => "no peer-memory client loaded (nvidia_peermem)",
        (MemoryKind::GpuDmabuf, Some(libc::EOPNOTSUPP)) => "device or kernel lacks dma-buf MRs",
        (_, Some(libc::EPERM | libc::ENOMEM)) => "pinned memory over RLIMIT_MEMLOCK (raise `ulimit -l` or run as root)",
        (_, Some(libc::EFAULT)) => "address range not mapped in this process",
        (_, Some(libc::EINVAL)) => "access flags or length not supported by the device",
        _ => "unknown (see errno)",
    }
}

fn page_size() -> usize {
    // long sysconf(int name);
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

fn validate(opts: &VerbsOpts, page_size: usize) -> Result<usize, VerbsError> {
    if opts.memory != MemoryKind::Host {
        return Err(VerbsError::MemoryNotBuilt(opts.memory));
    }
    let invalid = |m: String| Err(VerbsError::InvalidOptions(m));
    if opts.pages == 0 {
        return invalid("--pages must be at least 1".into());
    }
    let Some(buf_len) = opts.pages.checked_mul(page_size) else {
        return invalid(format!("--pages {} overflows the address space", opts.pages));
    };
    if opts.writes > 0 && (opts.write_size == 0 || opts.write_size > buf_len || u32::try_from(opts.write_size).is_err())
    {
        return invalid(format!(
            "--write-size {} must be between 1 and the buffer size ({} pages x {} = {} bytes)",
            opts.write_size, opts.pages, page_size, buf_len
        ));
    }
    Ok(buf_len)
}

/// Runs the workload: open device, churn registrations, RDMA WRITE loopback.
/// A destination mismatch is reported as `writes.verified == false`, not as
/// an error, so the report (and the trace) can still be inspected.
pub fn run(opts: &VerbsOpts) -> Result<VerbsReport, VerbsError> {
    let page_size = page_size();
    let buf_len = validate(opts, page_size)?;

    // 1. Devices. Without kernel verbs support (no ib_uverbs) the list is
    // NULL with ENOSYS: that is "no device" too.
    let list = match DeviceList::get() {
        Ok(list) => list,
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => return Err(VerbsError::NoDevice),
        Err(e) => {
            return Err(VerbsError::Call {
                call: "ibv_get_device_list",
                source: e,
            });
        }
    };
    if list.len() == 0 {
        return Err(VerbsError::NoDevice);
    }
    let names = list.names();
    let index = match &opts.device {
        None => 0,
        Some(want) => names
            .iter()
            .position(|n| n == want)
            .ok_or_else(|| VerbsError::DeviceNotFound {
                wanted: want.clone(),
                present: names.join(", "),
            })?,
    };
    let device = names.get(index).cloned().unwrap_or_default();
    let transport = match list.transport(index) {
        Some(sys::ibv_transport_type::IBV_TRANSPORT_IB) => "InfiniBand",
        Some(sys::ibv_transport_type::IBV_TRANSPORT_IWARP) => "iWARP",
        Some(sys::ibv_transport_type::IBV_TRANSPORT_USNIC | sys::ibv_transport_type::IBV_TRANSPORT_USNIC_UDP) => {
            "usNIC"
        }
        _ => "unknown",
    };

    // 2. Context and PD.
    let ctx = Context::open(&list, index).map_err(VerbsError::call("ibv_open_device"))?;
    let pd = Pd::alloc(&ctx).map_err(VerbsError::call("ibv_alloc_pd"))?;
    let port = write::PORT;
    let port_attr = write::query_port(&ctx).map_err(VerbsError::call("ibv_query_port"))?;

    // 3. Registration churn.
    let mut mrs = Vec::with_capacity(opts.registrations);
    for i in 0..opts.registrations {
        let mut buf = HostBuffer::new(buf_len).map_err(VerbsError::call("mmap"))?;
        buf.fill_with(|off| (i as u8) ^ (off / page_size) as u8);
        let (mr, reg_ns) = register(&pd, &buf, opts.memory, || format!("registration {i}"))?;
        let (lkey, rkey) = (mr.lkey(), mr.rkey());
        let t = Instant::now();
        mr.dereg().map_err(VerbsError::call("ibv_dereg_mr"))?;
        let dereg_ns = elapsed_ns(t);
        mrs.push(MrRecord {
            addr: buf.addr(),
            length: buf_len as u64,
            lkey,
            rkey,
            reg_ns,
            dereg_ns,
        });
    }
    let reg_latency = LatencySummary::from_samples(&mrs.iter().map(|m| m.reg_ns).collect::<Vec<_>>());
    let dereg_latency = LatencySummary::from_samples(&mrs.iter().map(|m| m.dereg_ns).collect::<Vec<_>>());

    // 4. RDMA WRITE loopback between two RC QPs.
    let phase = if opts.writes > 0 {
        Some(write::run_writes(&ctx, &pd, &device, &port_attr, opts, buf_len)?)
    } else {
        None
    };
    let (writes, qp_nums, gid) = match phase {
        Some(p) => (Some(p.report), Some(p.qp_nums), p.gid),
        None => (None, None, None),
    };

    // 5. Guards drop here in reverse order: PD, context, device list.
    Ok(VerbsReport {
        device,
        transport: transport.to_owned(),
        link_layer: write::link_layer_name(port_attr.link_layer).to_owned(),
        port,
        memory: opts.memory,
        reg_symbol: REG_SYMBOL,
        registrations: mrs.len(),
        deregistrations: mrs.len(),
        pages_per_registration: opts.pages,
        page_size,
        total_pages_registered: mrs.len() * opts.pages,
        reg_latency,
        dereg_latency,
        mrs,
        writes,
        qp_nums,
        gid_index: gid.as_ref().map(|g| g.0),
        gid: gid.map(|g| g.1),
    })
}

/// Registers `buf`, timing the `ibv_reg_mr` call.
fn register<'a>(
    pd: &'a Pd<'_>,
    buf: &'a HostBuffer,
    memory: MemoryKind,
    what: impl FnOnce() -> String,
) -> Result<(Mr<'a>, u64), VerbsError> {
    let t = Instant::now();
    let res = Mr::register(pd, buf, mr_access());
    let ns = elapsed_ns(t);
    match res {
        Ok(mr) => Ok((mr, ns)),
        Err(source) => Err(VerbsError::Registration {
            call: REG_SYMBOL,
            what: what(),
            addr: buf.addr(),
            length: buf.len(),
            hint: reg_failure_hint(memory, &source),
            source,
        }),
    }
}

fn elapsed_ns(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_summary_percentiles() {
        let s = LatencySummary::from_samples(&[5, 1, 4, 2, 3]);
        assert_eq!((s.count, s.min_ns, s.p50_ns, s.max_ns, s.mean_ns), (5, 1, 3, 5, 3));
        assert_eq!(LatencySummary::from_samples(&[]).count, 0);
    }

    #[test]
    fn gpu_memory_and_bad_sizes_are_rejected_before_touching_devices() {
        let gpu = VerbsOpts {
            memory: MemoryKind::GpuDmabuf,
            ..VerbsOpts::default()
        };
        let e = run(&gpu).err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(
            e,
            "--memory gpu-dmabuf: not built for GPU memory yet (only --memory host is implemented)"
        );
        let big = VerbsOpts {
            write_size: 1 << 30,
            ..VerbsOpts::default()
        };
        assert!(matches!(run(&big), Err(VerbsError::InvalidOptions(_))));
    }

    #[test]
    fn registration_hints() {
        let e = |n| io::Error::from_raw_os_error(n);
        assert!(reg_failure_hint(MemoryKind::GpuPeerMem, &e(libc::EFAULT)).contains("nvidia_peermem"));
        assert!(reg_failure_hint(MemoryKind::GpuDmabuf, &e(libc::EOPNOTSUPP)).contains("dma-buf"));
        assert!(reg_failure_hint(MemoryKind::Host, &e(libc::ENOMEM)).contains("RLIMIT_MEMLOCK"));
        assert!(reg_failure_hint(MemoryKind::Host, &e(libc::EPERM)).contains("RLIMIT_MEMLOCK"));
    }

    /// `NoDevice` exactly when the kernel lists no RDMA device (CI: none);
    /// with one, a small verified run. The answer is held to the kernel's
    /// own list, so a device that is there but not found fails.
    #[test]
    fn run_small_or_no_device() {
        let listed = std::fs::read_dir("/sys/class/infiniband").map_or(0, |d| d.count());
        let opts = VerbsOpts {
            registrations: 2,
            pages: 1,
            write_size: 4096,
            writes: 2,
            ..VerbsOpts::default()
        };
        match run(&opts) {
            Err(VerbsError::NoDevice) => {
                assert_eq!(
                    listed, 0,
                    "NoDevice although /sys/class/infiniband lists {listed} devices"
                )
            }
            Ok(r) => assert_eq!(
                r.summary_lines()[0],
                format!(
                    "verbs: registrations=2 deregistrations=2 pages_per_registration=1 page_size={} writes=2 verified=true",
                    r.page_size
                )
            ),
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
}
