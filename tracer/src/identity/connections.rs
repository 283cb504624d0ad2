//! A process's established TCP connections, from `/proc` only: the socket
//! inodes among its file descriptors (`/proc/PID/fd`) looked up in the
//! TCP tables of its network namespace (`/proc/PID/net/tcp`, `tcp6`). The
//! process is not stopped or entered. Two traced ranks whose connections
//! are the same socket pair seen from both ends (NCCL's bootstrap ring, its
//! proxies' and NET/Socket's connections, torch's store) belong to one job.
use std::{
    collections::BTreeMap,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
};

use serde::{Deserialize, Serialize};

/// Connections kept per process: a rank has a few per peer; a server with
/// thousands says nothing more about which job it is in.
pub const MAX_CONNECTIONS: usize = 256;

/// One established TCP connection, as the process sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Connection {
    pub local: SocketAddr,
    pub remote: SocketAddr,
}

impl Connection {
    /// The same connection seen from its other end.
    pub fn reversed(self) -> Self {
        Connection {
            local: self.remote,
            remote: self.local,
        }
    }
}

/// Whether two processes hold the two ends of one connection.
pub fn connected(a: &[Connection], b: &[Connection]) -> bool {
    a.iter().any(|c| b.contains(&c.reversed()))
}

/// The established TCP connections of `pid` (at most [`MAX_CONNECTIONS`],
/// in order); empty when it is gone or has none.
pub fn of_process(pid: u32) -> Vec<Connection> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    let inodes: std::collections::BTreeSet<u64> = fds
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|l| socket_inode(l.to_str()?))
        .collect();
    if inodes.is_empty() {
        return Vec::new();
    }
    let mut table = BTreeMap::new();
    for (file, v6) in [("tcp", false), ("tcp6", true)] {
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{file}")) {
            table.extend(parse_table(&text, v6));
        }
    }
    let mut out: Vec<Connection> = inodes.iter().filter_map(|i| table.get(i).copied()).collect();
    out.sort();
    out.dedup();
    out.truncate(MAX_CONNECTIONS);
    out
}

/// The inode of a `socket:[N]` fd link.
fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
}

/// `TCP_ESTABLISHED` in the tables' `st` column.
const ESTABLISHED: &str = "01";

/// The established connections of a `/proc/net/tcp` (or `tcp6`) table, by
/// socket inode.
pub fn parse_table(text: &str, v6: bool) -> BTreeMap<u64, Connection> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.get(3) != Some(&ESTABLISHED) {
                return None;
            }
            let conn = Connection {
                local: parse_addr(f.get(1)?, v6)?,
                remote: parse_addr(f.get(2)?, v6)?,
            };
            Some((f.get(9)?.parse().ok()?, conn))
        })
        .collect()
}

/// `0100007F:9C40` (IPv4) or 32 hex digits and a port (IPv6): the kernel
/// prints each 32-bit word of the address as a native-endian integer
/// (`seq_printf("%08X")` of the `__be32`), the port as a number. An IPv6
/// socket's IPv4-mapped address is its IPv4 address: its peer may be an
/// IPv4 socket.
fn parse_addr(s: &str, v6: bool) -> Option<SocketAddr> {
    let (addr, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| {
        addr.get(i * 8..i * 8 + 8)
            .and_then(|w| u32::from_str_radix(w, 16).ok())
            .map(u32::to_ne_bytes)
    };
    let ip = if v6 {
        if addr.len() != 32 {
            return None;
        }
        let mut b = [0u8; 16];
        for i in 0..4 {
            b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
        }
        let ip = Ipv6Addr::from(b);
        ip.to_ipv4_mapped().map_or(IpAddr::V6(ip), IpAddr::V4)
    } else {
        if addr.len() != 8 {
            return None;
        }
        IpAddr::V4(Ipv4Addr::from(word(0)?))
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Native-endian words, as this machine's kernel prints them.
    fn v4(ip: [u8; 4], port: u16) -> String {
        format!("{:08X}:{port:04X}", u32::from_ne_bytes(ip))
    }

    #[test]
    fn tables_give_established_connections_by_inode() {
        let table = format!(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
             0: {} 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1111 1 0 100 0 0 10 0\n\
             1: {} {} 01 00000000:00000000 00:00000000 00000000     0        0 2222 1 0 20 4 30 10 -1\n",
            v4([127, 0, 0, 1], 0),
            v4([127, 0, 0, 1], 40000),
            v4([10, 0, 0, 2], 51234),
        );
        let t = parse_table(&table, false);
        assert_eq!(t.len(), 1, "the listening socket is not a connection: {t:?}");
        let c = t[&2222];
        assert_eq!(c.local, "127.0.0.1:40000".parse().unwrap());
        assert_eq!(c.remote, "10.0.0.2:51234".parse().unwrap());
    }

    #[test]
    fn ipv4_mapped_ipv6_reads_as_ipv4() {
        let mapped: [u8; 16] = Ipv4Addr::new(192, 0, 2, 7).to_ipv6_mapped().octets();
        let hex: String = mapped
            .chunks(4)
            .map(|w| format!("{:08X}", u32::from_ne_bytes([w[0], w[1], w[2], w[3]])))
            .collect();
        assert_eq!(
            parse_addr(&format!("{hex}:1F90"), true),
            Some("192.0.2.7:8080".parse().unwrap())
        );
        let lo: String = Ipv6Addr::LOCALHOST
            .octets()
            .chunks(4)
            .map(|w| format!("{:08X}", u32::from_ne_bytes([w[0], w[1], w[2], w[3]])))
            .collect();
        assert_eq!(
            parse_addr(&format!("{lo}:0050"), true),
            Some("[::1]:80".parse().unwrap())
        );
        assert_eq!(parse_addr("0100007F", false), None, "no port");
        assert_eq!(parse_addr("0100007:0050", false), None, "short address");
    }

    #[test]
    fn two_ends_of_one_connection_are_connected() {
        let a = Connection {
            local: "127.0.0.1:40000".parse().unwrap(),
            remote: "127.0.0.1:51234".parse().unwrap(),
        };
        assert!(connected(&[a], &[a.reversed()]));
        assert!(
            !connected(&[a], &[a]),
            "the same end twice is two processes sharing a socket, not a peer"
        );
    }

    /// A real connection of this process, read back from its own /proc.
    #[test]
    fn reads_this_processs_connections() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_s, _) = l.accept().unwrap();
        let mine = of_process(std::process::id());
        let want = Connection {
            local: c.local_addr().unwrap(),
            remote: l.local_addr().unwrap(),
        };
        assert!(mine.contains(&want), "{want:?} not in {mine:?}");
        assert!(mine.contains(&want.reversed()), "the accepted end too: {mine:?}");
    }
}
