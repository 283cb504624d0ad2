//! RDMA WRITE phase of `drive verbs`: two RC QPs on one port, connected to
//! each other (loopback), K signalled WRITEs from A into B's buffer.

use std::ffi::CStr;
use std::io;
use std::net::Ipv6Addr;
use std::sync::atomic::{Ordering, fence};
use std::time::{Duration, Instant};

use rdma_sys as sys;

use super::ffi::{Context, Cq, HostBuffer, Mr, Pd, Qp, rc_error};
use super::{LatencySummary, MrRecord, VerbsError, VerbsOpts, WriteReport, elapsed_ns, register};

/// Port used for everything (rxe and single-port NICs have port 1).
pub(super) const PORT: u8 = 1;
/// Budget for all completions of the WRITE phase.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Max outstanding send WRs per QP (we keep one in flight).
const SQ_DEPTH: u32 = 16;

// enum { IBV_LINK_LAYER_UNSPECIFIED, IBV_LINK_LAYER_INFINIBAND, IBV_LINK_LAYER_ETHERNET };
const LINK_LAYER_INFINIBAND: u8 = 1;
const LINK_LAYER_ETHERNET: u8 = 2;

pub(super) fn link_layer_name(ll: u8) -> &'static str {
    match ll {
        LINK_LAYER_INFINIBAND => "InfiniBand",
        LINK_LAYER_ETHERNET => "Ethernet",
        _ => "unspecified",
    }
}

/// `ibv_query_port` is a C macro over the inline `___ibv_query_port`, which
/// rdma-sys reimplements (extended op, else the exported compat symbol).
// int ibv_query_port(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *port_attr);
pub(super) fn query_port(ctx: &Context<'_>) -> Result<sys::ibv_port_attr, io::Error> {
    // SAFETY: ibv_port_attr is plain integers; all-zero is valid.
    let mut attr: sys::ibv_port_attr = unsafe { std::mem::zeroed() };
    // SAFETY: live context, valid out-pointer sized for ibv_port_attr.
    let rc = unsafe { sys::___ibv_query_port(ctx.ptr.as_ptr(), PORT, &mut attr) };
    if rc == 0 { Ok(attr) } else { Err(rc_error(rc)) }
}

/// Picks a GID for RoCE: IPv4-mapped first (rxe on `lo`: ::ffff:127.0.0.1),
/// then any non-link-local, then link-local.
// int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid);
fn pick_gid(ctx: &Context<'_>, device: &str, attr: &sys::ibv_port_attr) -> Result<(u8, sys::ibv_gid), VerbsError> {
    let mut best: Option<(u8, u8, sys::ibv_gid)> = None; // (rank, index, gid); lower rank wins
    for index in 0..attr.gid_tbl_len.clamp(0, 256) {
        let mut gid = sys::ibv_gid { raw: [0; 16] };
        // SAFETY: live context; `gid` is a valid out-pointer for one union ibv_gid.
        if unsafe { sys::ibv_query_gid(ctx.ptr.as_ptr(), PORT, index, &mut gid) } != 0 {
            continue;
        }
        // SAFETY: every bit pattern of the union is a valid [u8; 16].
        let ip = Ipv6Addr::from(unsafe { gid.raw });
        let rank = if ip.is_unspecified() {
            continue;
        } else if ip.to_ipv4_mapped().is_some() {
            0
        } else if (ip.segments()[0] & 0xffc0) != 0xfe80 {
            1
        } else {
            2
        };
        let Ok(index) = u8::try_from(index) else {
            continue;
        };
        if best.as_ref().is_none_or(|b| rank < b.0) {
            best = Some((rank, index, gid));
        }
    }
    best.map(|(_, i, g)| (i, g)).ok_or_else(|| VerbsError::NoGid {
        device: device.to_owned(),
        port: PORT,
        entries: attr.gid_tbl_len,
    })
}

/// Address of the peer QP: same port, so our own LID / GID.
struct Peer {
    qpn: u32,
    lid: u16,
    gid: Option<(u8, sys::ibv_gid)>,
}

/// RESET -> INIT -> RTR -> RTS, connected to `peer`.
fn connect(qp: &Qp<'_>, peer: &Peer, mtu: sys::ibv_mtu::Type) -> Result<(), VerbsError> {
    use sys::ibv_qp_attr_mask as M;
    // SAFETY: ibv_qp_attr is plain data (ints and the Copy ah_attr); all-zero is valid.
    let zeroed = || -> sys::ibv_qp_attr { unsafe { std::mem::zeroed() } };

    let mut a = zeroed();
    a.qp_state = sys::ibv_qp_state::IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = PORT;
    a.qp_access_flags = super::mr_access();
    qp.modify(
        &mut a,
        M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS,
    )
    .map_err(VerbsError::call("ibv_modify_qp(INIT)"))?;

    let mut a = zeroed();
    a.qp_state = sys::ibv_qp_state::IBV_QPS_RTR;
    a.path_mtu = mtu;
    a.dest_qp_num = peer.qpn;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.dlid = peer.lid;
    a.ah_attr.sl = 0;
    a.ah_attr.src_path_bits = 0;
    a.ah_attr.port_num = PORT;
    if let Some((index, gid)) = peer.gid {
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid = gid;
        a.ah_attr.grh.sgid_index = index;
        a.ah_attr.grh.hop_limit = 64;
        a.ah_attr.grh.traffic_class = 0;
        a.ah_attr.grh.flow_label = 0;
    }
    let mask = M::IBV_QP_STATE
        | M::IBV_QP_AV
        | M::IBV_QP_PATH_MTU
        | M::IBV_QP_DEST_QPN
        | M::IBV_QP_RQ_PSN
        | M::IBV_QP_MAX_DEST_RD_ATOMIC
        | M::IBV_QP_MIN_RNR_TIMER;
    qp.modify(&mut a, mask)
        .map_err(VerbsError::call("ibv_modify_qp(RTR)"))?;

    let mut a = zeroed();
    a.qp_state = sys::ibv_qp_state::IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = 0;
    a.max_rd_atomic = 1;
    let mask = M::IBV_QP_STATE
        | M::IBV_QP_TIMEOUT
        | M::IBV_QP_RETRY_CNT
        | M::IBV_QP_RNR_RETRY
        | M::IBV_QP_SQ_PSN
        | M::IBV_QP_MAX_QP_RD_ATOMIC;
    qp.modify(&mut a, mask).map_err(VerbsError::call("ibv_modify_qp(RTS)"))
}

/// Source byte at `off`: a 251-cycle so every write carries a distinct pattern.
fn pattern(off: usize) -> u8 {
    ((off * 31 + 7) % 251) as u8
}

/// Posts one signalled RDMA WRITE and waits for its completion.
// static inline int ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
// static inline int ibv_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
fn write_once(
    qp: &Qp<'_>,
    cq: &Cq<'_>,
    wr_id: u64,
    sge: sys::ibv_sge,
    remote: sys::rdma_t,
    deadline: Instant,
) -> Result<bool, VerbsError> {
    let mut sge = sge;
    // SAFETY: ibv_send_wr is ints, nullable pointers and unions of those; all-zero is valid.
    let mut wr: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = wr_id;
    wr.sg_list = &mut sge;
    wr.num_sge = 1;
    wr.opcode = sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE;
    wr.send_flags = sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
    wr.wr.rdma = remote;
    let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
    // SAFETY: live RTS QP; `wr` and `sge` outlive the call (the provider copies
    // them into the send queue); sge describes a registered range.
    let rc = unsafe { sys::ibv_post_send(qp.ptr.as_ptr(), &mut wr, &mut bad) };
    if rc != 0 {
        return Err(VerbsError::Call {
            call: "ibv_post_send",
            source: rc_error(rc),
        });
    }
    loop {
        // SAFETY: ibv_wc is ints and a union of ints; all-zero is valid.
        let mut wc: sys::ibv_wc = unsafe { std::mem::zeroed() };
        // SAFETY: live CQ; room for exactly one entry.
        let n = unsafe { sys::ibv_poll_cq(cq.ptr.as_ptr(), 1, &mut wc) };
        if n < 0 {
            return Err(VerbsError::Call {
                call: "ibv_poll_cq",
                source: rc_error(n),
            });
        }
        if n == 1 {
            fence(Ordering::Acquire);
            if wc.status != sys::ibv_wc_status::IBV_WC_SUCCESS {
                // const char *ibv_wc_status_str(enum ibv_wc_status status);
                // SAFETY: returns a static NUL-terminated string for any status.
                let s = unsafe { CStr::from_ptr(sys::ibv_wc_status_str(wc.status)) };
                return Err(VerbsError::WorkCompletion {
                    index: wc.wr_id,
                    status: wc.status,
                    status_str: s.to_string_lossy().into_owned(),
                    vendor_err: wc.vendor_err,
                });
            }
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::yield_now();
    }
}

/// What the WRITE phase hands back to `run`.
pub(super) struct WritePhase {
    pub(super) report: WriteReport,
    pub(super) qp_nums: [u32; 2],
    /// (index, GID in IPv6 notation), RoCE only.
    pub(super) gid: Option<(u8, String)>,
}

pub(super) fn run_writes(
    ctx: &Context<'_>,
    pd: &Pd<'_>,
    device: &str,
    port_attr: &sys::ibv_port_attr,
    opts: &VerbsOpts,
    buf_len: usize,
) -> Result<WritePhase, VerbsError> {
    use sys::ibv_port_state as S;
    if port_attr.state != S::IBV_PORT_ACTIVE && port_attr.state != S::IBV_PORT_ACTIVE_DEFER {
        // const char *ibv_port_state_str(enum ibv_port_state port_state);
        // SAFETY: returns a static NUL-terminated string for any state.
        let s = unsafe { CStr::from_ptr(sys::ibv_port_state_str(port_attr.state)) };
        return Err(VerbsError::PortNotActive {
            device: device.to_owned(),
            port: PORT,
            state: s.to_string_lossy().into_owned(),
        });
    }
    let gid = if port_attr.link_layer == LINK_LAYER_ETHERNET {
        Some(pick_gid(ctx, device, port_attr)?)
    } else {
        None
    };

    let mut src = HostBuffer::new(buf_len).map_err(VerbsError::call("mmap"))?;
    let mut dst = HostBuffer::new(buf_len).map_err(VerbsError::call("mmap"))?;
    src.fill_with(pattern);
    dst.fill_with(|_| 0);
    let (src_mr, src_reg_ns) = register(pd, &src, opts.memory, || "RDMA WRITE source buffer".into())?;
    let (dst_mr, dst_reg_ns) = register(pd, &dst, opts.memory, || "RDMA WRITE destination buffer".into())?;

    let cqe = i32::try_from(SQ_DEPTH * 2).unwrap_or(32);
    let cq_a = Cq::create(ctx, cqe).map_err(VerbsError::call("ibv_create_cq"))?;
    let cq_b = Cq::create(ctx, cqe).map_err(VerbsError::call("ibv_create_cq"))?;
    let qp_a = Qp::create_rc(pd, &cq_a, SQ_DEPTH).map_err(VerbsError::call("ibv_create_qp"))?;
    let qp_b = Qp::create_rc(pd, &cq_b, SQ_DEPTH).map_err(VerbsError::call("ibv_create_qp"))?;
    let peer = |qpn| Peer {
        qpn,
        lid: port_attr.lid,
        gid,
    };
    connect(&qp_a, &peer(qp_b.qp_num()), port_attr.active_mtu)?;
    connect(&qp_b, &peer(qp_a.qp_num()), port_attr.active_mtu)?;

    // WRITE i lands in slot i % slots of the destination, at the same offset as its source.
    let ws = opts.write_size;
    let slots = (buf_len / ws).max(1);
    let mut latencies = Vec::with_capacity(opts.writes);
    let start = Instant::now();
    let deadline = start + WRITE_TIMEOUT;
    for i in 0..opts.writes {
        let off = (i % slots) * ws;
        let sge = sys::ibv_sge {
            addr: src.addr() + off as u64,
            length: ws as u32,
            lkey: src_mr.lkey(),
        };
        let remote = sys::rdma_t {
            remote_addr: dst.addr() + off as u64,
            rkey: dst_mr.rkey(),
        };
        let t = Instant::now();
        if !write_once(&qp_a, &cq_a, i as u64, sge, remote, deadline)? {
            return Err(VerbsError::Timeout {
                timeout_ms: WRITE_TIMEOUT.as_millis() as u64,
                completed: i,
                expected: opts.writes,
            });
        }
        latencies.push(elapsed_ns(t));
    }
    let elapsed = elapsed_ns(start);

    // Destination must equal the source where written and stay zero elsewhere.
    let written = opts.writes.min(slots) * ws;
    let (s, d) = (src.snapshot(), dst.snapshot());
    let first_mismatch = (0..buf_len).find(|&j| d[j] != if j < written { s[j] } else { 0 });

    let record = |mr: &Mr<'_>, buf: &HostBuffer, reg_ns| MrRecord {
        addr: buf.addr(),
        length: buf.len() as u64,
        lkey: mr.lkey(),
        rkey: mr.rkey(),
        reg_ns,
        dereg_ns: 0,
    };
    let (mut src_rec, mut dst_rec) = (record(&src_mr, &src, src_reg_ns), record(&dst_mr, &dst, dst_reg_ns));
    let (qp_num_a, qp_num_b) = (qp_a.qp_num(), qp_b.qp_num());
    // QPs must go before their MRs are deregistered; CQs after QPs.
    drop((qp_a, qp_b));
    drop((cq_a, cq_b));
    for (mr, rec) in [(src_mr, &mut src_rec), (dst_mr, &mut dst_rec)] {
        let t = Instant::now();
        mr.dereg().map_err(VerbsError::call("ibv_dereg_mr"))?;
        rec.dereg_ns = elapsed_ns(t);
    }

    let total_bytes = (opts.writes * ws) as u64;
    let report = WriteReport {
        count: latencies.len(),
        bytes_per_write: ws,
        total_bytes,
        verified: first_mismatch.is_none(),
        first_mismatch,
        elapsed_ns: elapsed,
        bandwidth_bytes_per_sec: if elapsed > 0 {
            total_bytes as f64 * 1e9 / elapsed as f64
        } else {
            0.0
        },
        latency: LatencySummary::from_samples(&latencies),
        path_mtu: 128u32 << port_attr.active_mtu,
        src_mr: src_rec,
        dst_mr: dst_rec,
    };
    Ok(WritePhase {
        report,
        qp_nums: [qp_num_a, qp_num_b],
        // SAFETY: every bit pattern of the union is a valid [u8; 16].
        gid: gid.map(|(i, g)| (i, Ipv6Addr::from(unsafe { g.raw }).to_string())),
    })
}
