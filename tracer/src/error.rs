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
    #[error("not permitted to use BPF ({0}); {hint}", hint = permission_hint())]
    Permission(String),
    #[error("{0}")]
    Usage(String),
    /// An input file (report, recording, baseline, thresholds, NCCL log)
    /// that cannot be read or is not what it claims to be.
    #[error("{0}")]
    Input(String),
    /// `run`'s command does not exist (as a shell says: exit 127).
    #[error("{0}")]
    CommandNotFound(String),
    /// `run`'s command exists but cannot be executed (exit 126).
    #[error("{0}")]
    CommandNotExecutable(String),
    /// A signal ended the command before it got going.
    #[error("interrupted by {name} before the command started")]
    Interrupted { name: &'static str, signo: i32 },
    #[error("{0}")]
    Workload(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What to do about a refused bpf(): the capabilities when they are
/// missing; when they are there, what else refuses (a container runtime's
/// seccomp profile: CRI-O's and podman's default allow bpf() only with
/// CAP_SYS_ADMIN, measured in tests/it/container.rs).
pub fn permission_hint() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| status.lines().find_map(|l| l.strip_prefix(k)).map(str::trim);
    let eff = field("CapEff:")
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .unwrap_or(0);
    const CAP_SYS_ADMIN: u64 = 1 << 21;
    const CAP_PERFMON: u64 = 1 << 38;
    const CAP_BPF: u64 = 1 << 39;
    let capable = eff & CAP_SYS_ADMIN != 0 || eff & (CAP_BPF | CAP_PERFMON) == CAP_BPF | CAP_PERFMON;
    if !capable {
        return "run as root or with CAP_BPF and CAP_PERFMON".into();
    }
    if field("Seccomp:").is_some_and(|m| m != "0") {
        "CAP_BPF and CAP_PERFMON are effective but a seccomp filter is active: the container runtime's default profile refuses bpf() (CRI-O and podman allow it only with CAP_SYS_ADMIN); use seccompProfile Unconfined (deploy/kubernetes/components/seccomp-unconfined)".into()
    } else {
        "CAP_BPF and CAP_PERFMON are effective: an LSM policy or kernel.unprivileged_bpf_disabled refuses it".into()
    }
}

/// Exit statuses of every command (the README's table). `run` otherwise
/// exits with its command's status, so its own failures before the command
/// starts use the shell's 126 and 127, as `env`, `nohup` and `timeout` do.
pub mod exit {
    /// Done; for `compare`, no regression.
    pub const OK: i32 = 0;
    /// The tool ran and the result is a failure: a runtime error, a failed
    /// `validate` check, a `compare` regression, nothing traced, an output
    /// file that could not be written at the end.
    pub const FAILURE: i32 = 1;
    /// Bad usage or unreadable input: an unknown flag, a bad value, an input
    /// file that is missing, not a regular file, too large or malformed; for
    /// `compare`, could not compare.
    pub const USAGE: i32 = 2;
    /// `validate --require-kernel-probes`: a kernel probe family is unavailable.
    pub const KERNEL_PROBES: i32 = 3;
    /// Not permitted to use BPF (run as root or with CAP_BPF and CAP_PERFMON).
    pub const NOT_PERMITTED: i32 = 4;
    /// `run`: the command exists but cannot be executed.
    pub const NOT_EXECUTABLE: i32 = 126;
    /// `run`: the command was not found.
    pub const NOT_FOUND: i32 = 127;
    /// Standard output was closed (EPIPE): printing stopped, files named by
    /// flags were still written. 128 + SIGPIPE, what a shell reports for a
    /// writer that a closed pipe ended.
    pub const STDOUT_CLOSED: i32 = 141;
}

impl Error {
    /// The exit status this error ends the command with.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) | Error::Input(_) => exit::USAGE,
            Error::Permission(_) => exit::NOT_PERMITTED,
            Error::CommandNotFound(_) => exit::NOT_FOUND,
            Error::CommandNotExecutable(_) => exit::NOT_EXECUTABLE,
            Error::Interrupted { signo, .. } => 128 + signo,
            _ => exit::FAILURE,
        }
    }

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
        libc::EISDIR => "EISDIR",
        libc::ENOTDIR => "ENOTDIR",
        libc::EROFS => "EROFS",
        libc::ENXIO => "ENXIO",
        libc::EPIPE => "EPIPE",
        libc::EFBIG => "EFBIG",
        libc::EDQUOT => "EDQUOT",
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
    cut_middle(&line, MAX_LINE).into_owned()
}

/// The longest error line, in bytes (about; see [`cut_middle`]).
pub const MAX_LINE: usize = 300;

/// `s` in at most about `max` bytes: a longer one loses its middle (`…`),
/// so that both what it is about (the start: the file, the flag) and the
/// reason (the end: `expected a string at line 3`) stay; cut at character
/// boundaries (a multi-byte character is never split).
pub fn cut_middle(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if s.len() <= max {
        return std::borrow::Cow::Borrowed(s);
    }
    let half = max / 2;
    let mut head = half;
    while !s.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = s.len() - half;
    while !s.is_char_boundary(tail) {
        tail += 1;
    }
    std::borrow::Cow::Owned(format!("{} … {}", &s[..head], &s[tail..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_lose_their_middle_at_char_boundaries() {
        assert_eq!(cut_middle("short", 300), "short");
        // A long quoted input, then the reason: both ends stay.
        let s = format!("t.toml: `{}` unknown field `bandwith`", "é".repeat(400));
        let c = cut_middle(&s, 300);
        assert!(c.starts_with("t.toml: `é"), "{c}");
        assert!(c.ends_with("unknown field `bandwith`"), "{c}");
        assert!(c.len() <= 310, "{}", c.len());
        // Every cut point inside a multi-byte character (the old
        // String::truncate(300) panicked there).
        for pad in 0..4 {
            let s = format!("{}{}", "x".repeat(pad), "€".repeat(200));
            let _ = cut_middle(&s, 300);
        }
        let e = std::io::Error::other("ü".repeat(400));
        assert!(describe(&e).len() <= 310);
    }
}
