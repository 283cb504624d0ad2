//! Who a process's NCCL communicators are across ranks and nodes. The
//! first source is the init call itself: the tracer hashes the
//! `ncclUniqueId` every rank passes to `ncclCommInitRank*`
//! (`stats::Communicator::of_init`). Where the set-up was not traced
//! (`attach`, `serve` after the job started), two more: NCCL's RAS service,
//! which lists every communicator with its hash and its ranks' pids
//! (`ras.rs`, opt-in), and the TCP connections between ranks (`connections.rs`,
//! read from `/proc` without touching the process). docs/job.md.
pub mod connections;
pub mod ras;

use serde::{Deserialize, Serialize};

pub use self::{connections::Connection, ras::RasQuery};

/// Where a communicator's identity came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IdSource {
    /// The `ncclUniqueId` the rank passed to `ncclCommInitRank*`, hashed as
    /// NCCL does.
    InitCall,
    /// NCCL's RAS service: the communicator's hash, with this process's
    /// pid among its ranks.
    NcclRas,
    /// TCP connections to another traced rank: the same job, with no
    /// commId.
    Connections,
}

impl IdSource {
    pub fn name(self) -> &'static str {
        match self {
            IdSource::InitCall => "init-call",
            IdSource::NcclRas => "nccl-ras",
            IdSource::Connections => "connections",
        }
    }

    /// What the source is, for the text views.
    pub fn describe(self) -> &'static str {
        match self {
            IdSource::InitCall => "ncclUniqueId read at ncclCommInitRank*",
            IdSource::NcclRas => "NCCL's RAS service",
            IdSource::Connections => "TCP connections between the ranks, no commId",
        }
    }
}

/// A communicator hash as NCCL prints it (`%lx` after `0x`), zero-padded to
/// 16 digits here so that every id has one spelling.
pub fn hex_id(hash: u64) -> String {
    format!("{hash:#018x}")
}

/// A hash as NCCL prints it (`0x` and up to 16 hex digits), in the one
/// spelling of [`hex_id`].
pub fn parse_id(s: &str) -> Option<String> {
    let digits = s.strip_prefix("0x")?;
    (!digits.is_empty() && digits.len() <= 16)
        .then(|| u64::from_str_radix(digits, 16).ok())
        .flatten()
        .map(hex_id)
}

/// The pid of `pid` in its own pid namespace (the last `NSpid` field of
/// `/proc/PID/status`): the pid NCCL's RAS lists for it.
pub fn ns_pid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_ns_pid(&status)
}

fn parse_ns_pid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_one_spelling() {
        assert_eq!(parse_id("0xa2bd4a35a81cd717").as_deref(), Some("0xa2bd4a35a81cd717"));
        assert_eq!(parse_id("0xe0eb010").as_deref(), Some("0x000000000e0eb010"));
        assert_eq!(parse_id("0x"), None);
        assert_eq!(parse_id("a2bd"), None);
        assert_eq!(parse_id("0x1234567890abcdef0"), None, "more than 64 bits");
    }

    #[test]
    fn namespace_pid_is_the_innermost() {
        assert_eq!(parse_ns_pid("Name:\tpython3\nNSpid:\t4242\t17\n"), Some(17));
        assert_eq!(parse_ns_pid("NSpid:\t4242\n"), Some(4242));
        assert_eq!(parse_ns_pid("Name:\tx\n"), None);
        assert!(ns_pid(std::process::id()).is_some(), "this process has an NSpid line");
    }
}
