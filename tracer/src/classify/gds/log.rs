//! cuFile's own log (`cufile.log`, written in the working directory or
//! `logging.dir`; `explain --cufile-log`): what cuFile said of each
//! process, compared with the file paths the tracer judged. Corroboration
//! only: a path stays as its bytes decided it.
//!
//! Lines look like (libcufile 1.15, 2026-12-06 on the GPU machine):
//! ```text
//!  06-12-2026 06:58:09:2 [pid=1350 tid=1350] NOTICE  cufio-drv:851 running in compatible mode
//!  06-12-2026 06:58:09:179 [pid=1350 tid=1350] ERROR  cufio-fs:79 mount option not found in mount table data device: /dev/vda
//! ```
use serde::{Deserialize, Serialize};

use crate::classify::{Transport, path::Path};

/// Lines kept per process.
const LINES: usize = 20;

/// What cuFile says when its driver falls back to compat mode: the notice
/// of the 2026-12-06 log, and libcufile 1.15's line where nvidia-fs is
/// missing or the configuration disables GDS (issue 45).
const COMPAT: [&str; 2] = [
    "running in compatible mode",
    "using cuFile posix read/write with compat mode enabled",
];

/// What cuFile's log says, per process.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct CufileLog {
    pub processes: Vec<LogProcess>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct LogProcess {
    pub pid: u32,
    /// `running in compatible mode` (or `... using cuFile posix read/write
    /// with compat mode enabled`): cuFile's driver fell back to POSIX I/O.
    pub compat: bool,
    /// Its notices, warnings and errors (level, source, message), the first few.
    pub lines: Vec<String>,
    /// Whether the tracer's file paths of the process agree: compat paths
    /// where the log says compat mode, direct ones where it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agrees: Option<bool>,
}

/// The pid and the rest of a log line: `[pid=1350 tid=1350] NOTICE ...`.
fn split(line: &str) -> Option<(u32, &str)> {
    let at = line.find("[pid=")?;
    let rest = &line[at + 5..];
    let end = rest.find(|c: char| !c.is_ascii_digit())?;
    let pid = rest[..end].parse().ok()?;
    let after = rest[end..].split_once(']')?.1.trim();
    Some((pid, after))
}

/// Parses a cufile.log: per process, compat mode and its messages.
pub fn parse(text: &str) -> CufileLog {
    let mut log = CufileLog::default();
    for line in text.lines() {
        let Some((pid, msg)) = split(line) else { continue };
        let p = match log.processes.iter().position(|p| p.pid == pid) {
            Some(i) => &mut log.processes[i],
            None => {
                log.processes.push(LogProcess {
                    pid,
                    ..LogProcess::default()
                });
                log.processes.last_mut().expect("just pushed")
            }
        };
        if COMPAT.iter().any(|m| msg.contains(m)) {
            p.compat = true;
        }
        let msg = msg.split_whitespace().collect::<Vec<_>>().join(" ");
        if p.lines.len() < LINES && !p.lines.contains(&msg) {
            p.lines.push(msg);
        }
    }
    log
}

/// The log against the judged file paths: each process's agreement.
pub fn corroborate(log: &mut CufileLog, paths: &[Path]) {
    for p in &mut log.processes {
        let mine: Vec<&Path> = paths
            .iter()
            .filter(|x| x.pid == p.pid && x.peer_kind == crate::classify::path::PeerKind::File)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let compat = |x: &&Path| x.transport == Transport::HostStaged;
        p.agrees = Some(if p.compat {
            mine.iter().all(compat)
        } else {
            !mine.iter().any(compat)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The log of the ctypes workload on the GPU machine (2026-12-06).
    #[test]
    fn compat_mode_and_errors_per_process() {
        let text = " 06-12-2026 06:58:09:2 [pid=1350 tid=1350] NOTICE  cufio-drv:851 running in compatible mode\n \
                    06-12-2026 06:58:09:179 [pid=1350 tid=1350] ERROR  cufio-fs:79 mount option not found in mount table data device: /dev/vda\n \
                    06-12-2026 06:58:20:228 [pid=1466 tid=1466] ERROR  cufio-fs:79 mount option not found in mount table data device: /dev/vda\n\
                    garbage line\n";
        let log = parse(text);
        assert_eq!(log.processes.len(), 2);
        let p = &log.processes[0];
        assert_eq!((p.pid, p.compat), (1350, true));
        assert_eq!(
            p.lines,
            vec![
                "NOTICE cufio-drv:851 running in compatible mode".to_string(),
                "ERROR cufio-fs:79 mount option not found in mount table data device: /dev/vda".to_string()
            ]
        );
        assert!(!log.processes[1].compat);
    }

    /// The fixture: two processes in compat mode, said either way, and
    /// one that is not; lines without a pid are not cuFile's.
    #[test]
    fn the_compat_notices_of_the_fixture() {
        let log = parse(include_str!("../../../../tests/fixtures/logs/cufile-compat.log"));
        let compat: Vec<(u32, bool)> = log.processes.iter().map(|p| (p.pid, p.compat)).collect();
        assert_eq!(compat, vec![(1350, true), (2210, true), (2300, false)]);
        let p = &log.processes[1];
        assert_eq!(p.lines.len(), 2, "{:?}", p.lines);
        assert!(p.lines[0].ends_with(
            "GDS not supported or disabled by config, using cuFile posix read/write with compat mode enabled"
        ));
        assert!(
            log.processes.iter().all(|p| p.agrees.is_none()),
            "no paths to compare yet"
        );
    }
}
