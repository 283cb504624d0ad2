//! TCP retransmissions, counted per (owner process, socket) in the kernel.
//!
//! The kernel retransmits from the retransmission timer and from the
//! softirq that reads ACKs, in whatever task runs at that moment, so the
//! task that fires `tcp_retransmit_skb` is not the socket's process. The
//! owner is learned where the process itself sends (`op::TCP_SEND`: the
//! `sock:sock_send_length` tracepoint, 6.2+, else `tcp_sendmsg` by
//! fentry/kprobe, `kfuncs.rs`; both aggregate-only with
//! `op_flags::SOCK_OWNER`, so each send also sums its bytes per socket) and
//! kept in `SOCK_OWNER` until the socket closes (`inet_sock_set_state`).
//! A retransmission on a socket with no owner is counted, not lost:
//! `counter::TCP_RETRANSMIT_UNOWNED`.
//!
//! Record layouts (`events/*/*/format`, the same on 6.1, 6.12 and 6.18 up
//! to the fields read here; the catalog rows list them and the planner
//! checks them against this kernel's format before attaching):
//! ```text
//! tcp/tcp_retransmit_skb: skbaddr @8, skaddr @16, int state @24, __u16 sport @28,
//!     dport @30, family @32, __u8 saddr[4] @34, daddr[4] @38, saddr_v6[16] @42,
//!     daddr_v6[16] @58  (6.10+: int err @76)
//! sock/sock_send_length: void *sk @8, __u16 family @16, protocol @18, int ret @20
//! sock/inet_sock_set_state: skaddr @8, int oldstate @16, newstate @20, ...,
//!     __u16 protocol @30
//! ```
use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::tracepoint, programs::TracePointContext};
use tracer_common::{
    AggKey, AggValue, counter, kind,
    net::{AF_INET, AF_INET6, Conn, IPPROTO_TCP, TCP_CLOSE},
    op,
};

use crate::{
    maps::{AGGREGATE, HITS, SOCK_OWNER, bump, count, stopped},
    probes::{emit, on_call},
};

/// `tcp_retransmit_skb`'s fields from `skaddr` to the end of `daddr_v6`.
#[repr(C, packed)]
#[derive(Clone, Copy)]
struct Retransmit {
    skaddr: u64,
    state: i32,
    sport: u16,
    dport: u16,
    family: u16,
    _saddr: [u8; 4],
    _daddr: [u8; 4],
    saddr_v6: [u8; 16],
    daddr_v6: [u8; 16],
}
const RETRANSMIT_AT: usize = 16;
const _: () = assert!(core::mem::size_of::<Retransmit>() == 74 - RETRANSMIT_AT);

#[tracepoint]
pub fn tcp_retransmit_skb(ctx: TracePointContext) -> u32 {
    if stopped() {
        return 0;
    }
    // SAFETY: offsets from the format above, checked by the planner.
    let Ok(r) = (unsafe { ctx.read_at::<Retransmit>(RETRANSMIT_AT) }) else {
        count(counter::READ_ERRORS);
        return 1;
    };
    let sock = r.skaddr;
    // SAFETY: read-only lookup of a plain value.
    let Some(tgid) = (unsafe { SOCK_OWNER.get(sock) }).copied() else {
        count(counter::TCP_RETRANSMIT_UNOWNED);
        return 0;
    };
    bump(&HITS, op::TCP_RETRANSMIT);
    let key = AggKey {
        tgid,
        op: op::TCP_RETRANSMIT,
        handle: sock,
    };
    match AGGREGATE.get_ptr_mut(key) {
        // SAFETY: per-CPU value, no concurrent writer on this CPU.
        Some(v) => unsafe { (*v).calls += 1 },
        None => {
            if AGGREGATE.insert(key, AggValue { calls: 1, bytes: 0 }, 0).is_err() {
                count(counter::AGGREGATE_FULL);
                return 0;
            }
            // The row's first retransmission names its connection (once:
            // the per-CPU row exists on every CPU from now on). The record
            // is the owner's, not the task's that fired it.
            let conn = Conn {
                sock,
                family: r.family,
                sport: r.sport,
                dport: r.dport,
                state: r.state as u16,
                saddr: r.saddr_v6,
                daddr: r.daddr_v6,
            };
            // SAFETY: helper without preconditions.
            let now = unsafe { bpf_ktime_get_ns() };
            emit(
                kind::ENTRY,
                op::TCP_RETRANSMIT,
                (tgid as u64) << 32,
                now,
                0,
                conn.to_args(),
                0,
                false,
            );
        }
    }
    0
}

/// `sock_send_length`'s fields from `sk` to `ret`.
#[repr(C)]
#[derive(Clone, Copy)]
struct SendLength {
    sk: u64,
    family: u16,
    protocol: u16,
    ret: i32,
}

/// `sock:sock_send_length` (`sock_sendmsg`, so `send`, `sendmsg`, `write`
/// and io_uring sends alike), after the call, with its result.
#[tracepoint]
pub fn sock_send_length(ctx: TracePointContext) -> u32 {
    // SAFETY: offsets from the format above, checked by the planner.
    let Ok(s) = (unsafe { ctx.read_at::<SendLength>(8) }) else {
        count(counter::READ_ERRORS);
        return 1;
    };
    if s.protocol != IPPROTO_TCP || (s.family != AF_INET && s.family != AF_INET6) {
        return 0;
    }
    match on_call(op::TCP_SEND, [s.sk, 0, 0, 0, 0, 0], s.ret as i64) {
        Ok(v) => v,
        Err(e) => e.code(),
    }
}

/// `inet_sock_set_state`'s `newstate` and `protocol`.
#[repr(C)]
#[derive(Clone, Copy)]
struct SetState {
    skaddr: u64,
    _oldstate: i32,
    newstate: i32,
    _ports: u32,
    _family: u16,
    protocol: u16,
}

/// `sock:inet_sock_set_state`: a TCP socket that closes has no owner any
/// more (its address may be a new socket's next).
#[tracepoint]
pub fn inet_sock_set_state(ctx: TracePointContext) -> u32 {
    // SAFETY: offsets from the format above, checked by the planner.
    let Ok(s) = (unsafe { ctx.read_at::<SetState>(8) }) else {
        count(counter::READ_ERRORS);
        return 1;
    };
    if s.newstate == TCP_CLOSE && s.protocol == IPPROTO_TCP {
        let _ = SOCK_OWNER.remove(s.skaddr);
    }
    0
}
