//! Library errors. Every variant renders as one line a user can act on.
use std::io;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot load the BPF programs: {0}")]
    Load(#[source] aya::EbpfError),
    #[error("BPF program {name}: {source}")]
    Program {
        name: String,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error("BPF map {name}: {source}")]
    Map {
        name: String,
        #[source]
        source: aya::maps::MapError,
    },
    #[error("BPF map {0} is missing from the embedded object")]
    MissingMap(&'static str),
    #[error("BPF program {0} is missing from the embedded object")]
    MissingProgram(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("not permitted to use BPF ({0}); run as root or with CAP_BPF and CAP_PERFMON")]
    Permission(String),
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Workload(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

/// The first OS error in an error's source chain, as `EPERM (Operation not
/// permitted)`: what `doctor` and the coverage table print for a refusal.
pub fn errno_of(err: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<io::Error>()
            && let Some(code) = io.raw_os_error()
        {
            return Some(code);
        }
        cur = e.source();
    }
    None
}

/// Symbolic name of an errno value.
pub fn errno_name(code: i32) -> &'static str {
    match code {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::E2BIG => "E2BIG",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ENOSYS => "ENOSYS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        524 => "ENOTSUPP",
        _ => "errno",
    }
}

/// One-line description of an error and its causes, with the errno named.
pub fn describe(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![err.to_string()];
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        cur = e.source();
    }
    let mut line = parts.join(": ").replace('\n', " ");
    // aya appends an empty verifier log to load errors; drop the dangling label.
    let trimmed = line.trim_end();
    if let Some(stripped) = trimmed.strip_suffix("Verifier output:") {
        line = stripped.trim_end().trim_end_matches('.').to_string();
    }
    if let Some(code) = errno_of(err) {
        let name = errno_name(code);
        if !line.contains(name) {
            line = format!("{name}: {line}");
        }
    }
    // Verifier logs can be long; one line is the contract.
    if line.len() > 300 {
        line.truncate(300);
        line.push('…');
    }
    line
}
