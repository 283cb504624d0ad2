//! `gdrtrace drive tcp`: one TCP connection over the loopback device,
//! sender and receiver in this process (the receiver on a thread): the
//! sender writes `--bytes` in `--chunk` sends, the receiver reads to the
//! end. It prints the kernel's own count of the connection's segments and
//! retransmissions (`TCP_INFO`), so a test can hold the tracer's count of
//! retransmitted packets to it. Addresses are loopback only.
use std::{
    io::{Read, Write},
    net::{Ipv4Addr, TcpListener, TcpStream},
    os::fd::AsRawFd,
    time::Instant,
};

use serde::Serialize;

#[derive(Clone, Debug, clap::Args)]
pub struct TcpOpts {
    /// Bytes to send (e.g. 200M).
    #[arg(long, default_value = "256M", value_parser = crate::units::parse_size)]
    pub bytes: u64,
    /// Bytes per send call.
    #[arg(long, default_value = "64K", value_parser = crate::units::parse_size)]
    pub chunk: u64,
    /// Port the receiver listens on at 127.0.0.1 (0: one the kernel picks).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Also write the summary as JSON to this file.
    #[arg(long)]
    pub summary: Option<std::path::PathBuf>,
}

#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct TcpSummary {
    pub pid: u32,
    pub port: u16,
    pub bytes: u64,
    pub sends: u64,
    pub elapsed_s: f64,
    /// CPU time of the process (both ends: loopback delivery runs in the
    /// sender's context) over the transfer.
    pub cpu_s: f64,
    /// The sending socket's `tcpi_data_segs_out` and `tcpi_total_retrans`
    /// once the receiver had every byte (segments, not packets: one
    /// retransmitted packet may hold several under segmentation offload).
    pub segments_sent: u64,
    pub segments_retransmitted: u64,
}

impl TcpSummary {
    pub fn line(&self) -> String {
        format!(
            "tcp: pid={} port={} bytes={} sends={} elapsed {:.3} s ({:.0} MB/s) segments sent={} retransmitted={}",
            self.pid,
            self.port,
            self.bytes,
            self.sends,
            self.elapsed_s,
            self.bytes as f64 / self.elapsed_s.max(1e-9) / 1e6,
            self.segments_sent,
            self.segments_retransmitted
        )
    }
}

/// CPU time of this process so far (user + system), in seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct we own.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut r) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(r.ru_utime) + t(r.ru_stime)
}

/// The kernel's `struct tcp_info` of a connected socket.
fn tcp_info(s: &TcpStream) -> std::io::Result<libc::tcp_info> {
    // SAFETY: `tcp_info` is plain integers; the kernel writes at most `len` bytes.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: a valid fd, and a buffer of `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(info)
}

pub fn run(o: &TcpOpts) -> Result<TcpSummary, String> {
    let io = |what: &'static str| move |e: std::io::Error| format!("tcp: {what}: {e}");
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, o.port)).map_err(io("listening on 127.0.0.1"))?;
    let port = listener.local_addr().map_err(io("the listener's address"))?.port();
    let receiver = std::thread::spawn(move || -> std::io::Result<u64> {
        let (mut c, _) = listener.accept()?;
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0u64;
        loop {
            match c.read(&mut buf)? {
                0 => return Ok(got),
                n => got += n as u64,
            }
        }
    });
    let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).map_err(io("connecting"))?;
    let chunk = vec![0x5au8; o.chunk.clamp(1, 64 << 20) as usize];
    let started = Instant::now();
    let cpu_before = cpu_seconds();
    let (mut sent, mut sends) = (0u64, 0u64);
    while sent < o.bytes {
        let n = chunk.len().min((o.bytes - sent) as usize);
        s.write_all(&chunk[..n]).map_err(io("sending"))?;
        sent += n as u64;
        sends += 1;
    }
    s.shutdown(std::net::Shutdown::Write)
        .map_err(io("shutting the connection down"))?;
    let got = receiver
        .join()
        .map_err(|_| "tcp: the receiver thread panicked".to_string())?
        .map_err(io("receiving"))?;
    let elapsed_s = started.elapsed().as_secs_f64();
    let cpu_s = cpu_seconds() - cpu_before;
    if got != sent {
        return Err(format!("tcp: sent {sent} bytes, the receiver got {got}"));
    }
    let info = tcp_info(&s).map_err(io("reading TCP_INFO"))?;
    Ok(TcpSummary {
        pid: std::process::id(),
        port,
        bytes: sent,
        sends,
        elapsed_s,
        cpu_s,
        segments_sent: info.tcpi_data_segs_out as u64,
        segments_retransmitted: info.tcpi_total_retrans as u64,
    })
}
