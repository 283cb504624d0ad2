//! TCP per (process, socket): the sends and retransmissions the kernel
//! counted (`probes::catalog::NETWORK`, tracer-ebpf/src/net.rs), and the
//! connection each retransmitting socket names in its first record.
use std::collections::BTreeMap;

use tracer_common::{AggKey, AggValue, Event, net::Conn, op};

use super::Aggregator;

/// One TCP socket of one process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpSocket {
    /// Sends (`sock_sendmsg` calls, failed ones included) and the bytes
    /// they moved.
    pub sends: u64,
    pub bytes_sent: u64,
    /// Packets the kernel retransmitted (one `sk_buff` each, which may hold
    /// several segments under segmentation offload).
    pub retransmits: u64,
    /// Addresses and ports, known once it retransmitted.
    pub conn: Option<Conn>,
}

/// TCP sockets by (process, `struct sock *`).
pub type TcpSockets = BTreeMap<(u32, u64), TcpSocket>;

impl Aggregator {
    /// The kernel's TCP rows (cumulative totals) of one tick.
    pub(super) fn tcp_rows<'a>(&mut self, rows: impl Iterator<Item = &'a (AggKey, AggValue)>) {
        for (k, v) in rows {
            let s = self.tcp.entry((k.tgid, k.handle)).or_default();
            match k.op {
                op::TCP_SEND => {
                    s.sends = v.calls;
                    s.bytes_sent = v.bytes;
                }
                op::TCP_RETRANSMIT => s.retransmits = v.calls,
                _ => {}
            }
        }
    }

    /// A retransmitting socket's connection (`kind::ENTRY` of
    /// `op::TCP_RETRANSMIT`, whose `pid` is the socket's process).
    pub(super) fn tcp_conn(&mut self, e: &Event) {
        let conn = Conn::from_args(&e.args);
        self.tcp.entry((e.pid, conn.sock)).or_default().conn = Some(conn);
    }

    /// Every TCP socket the kernel counted, by (process, socket).
    pub fn tcp(&self) -> &TcpSockets {
        &self.tcp
    }
}

#[cfg(test)]
mod tests {
    use tracer_common::kind;

    use super::*;

    #[test]
    fn rows_and_first_records_meet_per_socket() {
        let mut a = Aggregator::default();
        let conn = Conn {
            sock: 0xffff_8880_1234_5600,
            family: tracer_common::net::AF_INET,
            sport: 40000,
            dport: 5555,
            state: 1,
            saddr: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1],
            daddr: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1],
        };
        a.push(&Event {
            kind: kind::ENTRY,
            op: op::TCP_RETRANSMIT,
            pid: 77,
            args: conn.to_args(),
            ..Default::default()
        });
        let key = |op| AggKey {
            tgid: 77,
            op,
            handle: conn.sock,
        };
        a.set_aggregates(
            1,
            &[
                (
                    key(op::TCP_SEND),
                    AggValue {
                        calls: 10,
                        bytes: 5 << 20,
                    },
                ),
                (key(op::TCP_RETRANSMIT), AggValue { calls: 3, bytes: 0 }),
            ],
        );
        let s = a.tcp()[&(77, conn.sock)];
        assert_eq!((s.sends, s.bytes_sent, s.retransmits), (10, 5 << 20, 3));
        assert_eq!(s.conn, Some(conn));
        assert!(a.collectives().is_empty(), "TCP rows are not collectives");
        assert_eq!(
            a.procs().get(&77).map_or(0, |p| p.socket.bytes_sent),
            0,
            "nor socket syscalls"
        );
    }
}
