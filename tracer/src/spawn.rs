//! Starting a traced command without a race: the child is forked, waits on
//! a pipe until the tracer has put its pid in the target set, then execs.
//! The command is looked up first, as execvp(3) will look it up, so "not
//! found" (127) and "not executable" (126) come before any BPF is loaded;
//! an exec failure that still happens comes back through a close-on-exec
//! pipe. The child is watched through a pidfd, so waiting for it never
//! blocks a thread the tracer would have to join.
use std::{
    ffi::{CString, OsStr},
    io,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    os::unix::ffi::OsStrExt as _,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use crate::{
    error::{Error, Result},
    signals::{Received, Signals},
};

/// Where execvp(3) looks when `PATH` is unset: the C library's default
/// (`confstr(_CS_PATH)`, `/bin:/usr/bin` in glibc).
fn default_path() -> String {
    let mut buf = vec![0u8; 256];
    // SAFETY: confstr writes at most buf.len() bytes, NUL-terminated.
    let n = unsafe { libc::confstr(libc::_CS_PATH, buf.as_mut_ptr().cast(), buf.len()) };
    if n == 0 || n > buf.len() {
        return "/bin:/usr/bin".into();
    }
    buf.truncate(n - 1);
    String::from_utf8(buf).unwrap_or_else(|_| "/bin:/usr/bin".into())
}

/// Why a candidate path cannot be executed, or None if it can.
fn not_executable(p: &Path) -> Option<&'static str> {
    let meta = std::fs::metadata(p).ok()?;
    if meta.is_dir() {
        return Some("is a directory");
    }
    let c = CString::new(p.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: access(2) on a NUL-terminated path.
    let x_ok = unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0;
    // access(2) says yes to root for any file with one x bit; none is "no".
    if !meta.is_file() || !x_ok || meta.permissions().mode() & 0o111 == 0 {
        return Some("permission denied (not executable)");
    }
    None
}

/// A script whose `#!` interpreter is missing or not executable: exit 126
/// before anything is loaded, as a shell says "bad interpreter" (execve(2)
/// fails with ENOENT there, which is not "command not found").
fn bad_interpreter(argv0: &str, script: &Path) -> Result<()> {
    use std::io::Read as _;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(script)
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    let Some(line) = head[..n].strip_prefix(b"#!") else {
        return Ok(());
    };
    let line = line.split(|b| *b == b'\n').next().unwrap_or(&[]);
    let Some(interp) = line.split(|b| *b == b' ' || *b == b'\t').find(|w| !w.is_empty()) else {
        return Err(Error::CommandNotExecutable(format!(
            "cannot run '{argv0}': {}: a #! line without an interpreter",
            script.display()
        )));
    };
    let interp = Path::new(OsStr::from_bytes(interp));
    let why = if !interp.exists() {
        "no such file"
    } else if let Some(why) = not_executable(interp) {
        why
    } else {
        return Ok(());
    };
    Err(Error::CommandNotExecutable(format!(
        "cannot run '{argv0}': bad interpreter {} ({why})",
        interp.display()
    )))
}

/// Finds `argv0` as execvp(3) does: a name with a slash as it is, else each
/// `PATH` entry in turn (an empty entry is the current directory; an unset
/// `PATH` is the C library's default). A match that exists but cannot be
/// executed is remembered and the search goes on, as execvp does (EACCES).
pub fn resolve(argv0: impl AsRef<OsStr>) -> Result<PathBuf> {
    let raw = argv0.as_ref();
    if raw.is_empty() {
        return Err(Error::CommandNotFound("cannot run '': an empty command name".into()));
    }
    let argv0 = raw.to_string_lossy();
    let argv0 = argv0.as_ref();
    let slash = raw.as_bytes().contains(&b'/');
    let candidates: Vec<PathBuf> = if slash {
        vec![PathBuf::from(raw)]
    } else {
        let path = std::env::var("PATH").unwrap_or_else(|_| default_path());
        path.split(':')
            .map(|dir| {
                if dir.is_empty() {
                    PathBuf::from(raw)
                } else {
                    Path::new(dir).join(raw)
                }
            })
            .collect()
    };
    let mut refused = None;
    for c in &candidates {
        if !c.exists() {
            continue;
        }
        match not_executable(c) {
            None => {
                bad_interpreter(argv0, c)?;
                return Ok(c.clone());
            }
            Some(why) => {
                refused.get_or_insert((c.clone(), why));
            }
        }
    }
    match refused {
        Some((p, why)) => Err(Error::CommandNotExecutable(format!(
            "cannot run '{argv0}': {} {why}",
            p.display()
        ))),
        None if slash => Err(Error::CommandNotFound(format!(
            "cannot run '{argv0}': command not found (no such file)"
        ))),
        None => Err(Error::CommandNotFound(format!(
            "cannot run '{argv0}': command not found in PATH"
        ))),
    }
}

pub struct Gated {
    pub pid: u32,
    gate: OwnedFd,
    exec_err: OwnedFd,
    argv0: String,
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: valid array for two fds.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh fds owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Where a started command's standard output goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandStdout {
    /// gdrtrace's own standard output (the command's output, then the text report).
    Inherit,
    /// gdrtrace's standard error: standard output holds a document of
    /// gdrtrace's (`--format json`), which the command's lines would break.
    ToStderr,
}

/// Forks `argv` held before exec. Arguments are bytes, as execve(2) takes
/// them: any, UTF-8 or not (`printf 'x\xffy'`).
pub fn spawn_gated<S: AsRef<OsStr>>(argv: &[S], stdout: CommandStdout) -> Result<Gated> {
    let Some(argv0) = argv.first() else {
        return Err(Error::Usage("no command given".into()));
    };
    let argv0 = argv0.as_ref().to_string_lossy().into_owned();
    let cargs: Vec<CString> = argv
        .iter()
        .map(|a| {
            CString::new(a.as_ref().as_bytes())
                .map_err(|_| Error::Usage(format!("argument contains a NUL byte: {:?}", a.as_ref())))
        })
        .collect::<Result<_>>()?;
    let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let (gate_r, gate_w) = pipe().map_err(|e| Error::io("pipe", e))?;
    let (err_r, err_w) = pipe().map_err(|e| Error::io("pipe", e))?;
    // SAFETY: the child only calls async-signal-safe functions (read,
    // signal, sigprocmask, dup2, execvp, write, _exit) on memory prepared before
    // the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(Error::io("fork", io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: see above.
        unsafe {
            let mut b = 0u8;
            while libc::read(gate_r.as_raw_fd(), (&mut b as *mut u8).cast(), 1) < 0
                && *libc::__errno_location() == libc::EINTR
            {}
            // Rust ignores SIGPIPE in its own processes, and an ignored
            // signal stays ignored across exec: give the command the
            // default (`gdrtrace run -- yes | head -1` must end `yes`).
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            if stdout == CommandStdout::ToStderr {
                libc::dup2(libc::STDERR_FILENO, libc::STDOUT_FILENO);
            }
            libc::execvp(ptrs[0], ptrs.as_ptr());
            let errno = *libc::__errno_location();
            libc::write(err_w.as_raw_fd(), (&errno as *const i32).cast(), 4);
            libc::_exit(127);
        }
    }
    drop(gate_r);
    drop(err_w);
    Ok(Gated {
        pid: pid as u32,
        gate: gate_w,
        exec_err: err_r,
        argv0,
    })
}

impl Gated {
    /// Lets the child exec; reports an exec failure as an error.
    pub fn release(self) -> Result<Child> {
        let one = 1u8;
        // A pidfd taken while the child is held refers to it for sure (no
        // pid reuse possible before we reap it).
        let pidfd = pidfd_open(self.pid);
        // SAFETY: writing one byte from a valid buffer to our pipe end.
        unsafe { libc::write(self.gate.as_raw_fd(), (&one as *const u8).cast(), 1) };
        drop(self.gate);
        let mut errno = 0i32;
        // SAFETY: reading up to 4 bytes into a valid i32.
        let n = loop {
            let n = unsafe { libc::read(self.exec_err.as_raw_fd(), (&mut errno as *mut i32).cast(), 4) };
            if n >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break n;
            }
        };
        if n == 4 {
            let mut status = 0;
            // SAFETY: reaping our own child.
            unsafe { libc::waitpid(self.pid as i32, &mut status, 0) };
            let msg = format!("cannot run '{}': {}", self.argv0, io::Error::from_raw_os_error(errno));
            return Err(if errno == libc::ENOENT {
                Error::CommandNotFound(msg)
            } else {
                Error::CommandNotExecutable(msg)
            });
        }
        Ok(Child {
            pid: self.pid,
            pidfd,
            status: None,
        })
    }
}

fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open(2) with no flags; a non-negative result is a new fd.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) };
    // SAFETY: a fresh descriptor owned by nobody else.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A process that is not our child, held by a pidfd (Linux 5.3+): signals
/// reach it and only it, and it can be waited for by poll(2).
#[derive(Debug)]
pub struct Watched {
    pub pid: u32,
    fd: OwnedFd,
}

impl Watched {
    /// None when it is gone (or the kernel has no pidfds).
    pub fn open(pid: u32) -> Option<Self> {
        pidfd_open(pid).map(|fd| Watched { pid, fd })
    }

    /// pidfd_send_signal(2); false when it has exited.
    pub fn signal(&self, sig: i32) -> bool {
        // SAFETY: pidfd_send_signal(2) on our pidfd, no siginfo, no flags.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.fd.as_raw_fd(),
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            ) == 0
        }
    }

    /// Whether it has exited (its pidfd is readable then).
    fn exited(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll(2) on one valid pollfd, no wait.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }
}

/// Waits until every one of `procs` has exited or `until` passes, then
/// sends SIGKILL to those still running; a signal ends the wait at once
/// (nothing is killed then). Returns how many got SIGKILL.
pub fn watch_until(procs: &[Watched], until: Instant, signals: &Signals) -> usize {
    loop {
        let running: Vec<&Watched> = procs.iter().filter(|w| !w.exited()).collect();
        if running.is_empty() || signals.try_recv().is_some() {
            return 0;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return running.iter().filter(|w| w.signal(libc::SIGKILL)).count();
        }
        let mut fds: Vec<libc::pollfd> = running
            .iter()
            .map(|w| w.fd.as_raw_fd())
            .chain([signals.fd()])
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: poll(2) on a valid array of pollfds.
        unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                left.as_millis().clamp(1, i32::MAX as u128) as i32,
            )
        };
    }
}

/// Turns a wait status into a shell-style exit code (128+signal).
fn exit_code(status: i32) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}

/// Waits for a child and returns a shell-style exit code (128+signal).
pub fn wait(pid: u32) -> i32 {
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid as i32, &mut status, 0) };
        if r >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
    }
    exit_code(status)
}

/// The traced command, running.
#[derive(Debug)]
pub struct Child {
    pub pid: u32,
    /// Readable once the process has exited (None on kernels before 5.3:
    /// then waiting polls).
    pidfd: Option<OwnedFd>,
    status: Option<i32>,
}

/// How [`Child::wait_or_signal`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waited {
    Exited(i32),
    Signal(Received),
    TimedOut,
}

impl Child {
    /// Its exit code, if it has exited (reaps it).
    pub fn try_wait(&mut self) -> Option<i32> {
        if self.status.is_none() {
            let mut status = 0;
            // SAFETY: a non-blocking wait for our own child.
            let r = unsafe { libc::waitpid(self.pid as i32, &mut status, libc::WNOHANG) };
            if r == self.pid as i32 {
                self.status = Some(exit_code(status));
            }
        }
        self.status
    }

    /// Sends `sig`, unless it has exited already.
    pub fn signal(&mut self, sig: i32) {
        if self.try_wait().is_none() {
            // SAFETY: our own child, not reaped yet, so the pid is still its.
            unsafe { libc::kill(self.pid as i32, sig) };
        }
    }

    /// Completes with its exit code when it exits (inside a tokio runtime).
    pub async fn exited(&mut self) -> i32 {
        if let Some(fd) = self.pidfd.as_ref().map(|f| f.as_raw_fd())
            // SAFETY: the pidfd is ours and stays open while `afd` lives.
            && let Ok(afd) =
                unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        {
            loop {
                if let Some(code) = self.try_wait() {
                    return code;
                }
                match afd.readable().await {
                    Ok(mut g) => g.clear_ready(),
                    Err(_) => break,
                }
            }
        }
        // No pidfd: poll.
        loop {
            if let Some(code) = self.try_wait() {
                return code;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (outside any runtime) until it exits, a signal arrives, or
    /// `timeout` passes.
    pub fn wait_or_signal(&mut self, signals: &Signals, timeout: Duration) -> Waited {
        let until = Instant::now() + timeout;
        loop {
            if let Some(code) = self.try_wait() {
                return Waited::Exited(code);
            }
            if let Some(s) = signals.try_recv() {
                return Waited::Signal(s);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Waited::TimedOut;
            }
            let mut fds = vec![libc::pollfd {
                fd: signals.fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            let step = match &self.pidfd {
                Some(p) => {
                    fds.push(libc::pollfd {
                        fd: p.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    });
                    left
                }
                None => left.min(Duration::from_millis(50)),
            };
            // SAFETY: poll(2) on a valid array of pollfds.
            unsafe {
                libc::poll(
                    fds.as_mut_ptr(),
                    fds.len() as libc::nfds_t,
                    step.as_millis().clamp(1, i32::MAX as u128) as i32,
                )
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_finds_as_execvp_does() {
        assert!(resolve("sh").is_ok(), "sh is on PATH");
        assert!(matches!(resolve("/"), Err(Error::CommandNotExecutable(m)) if m.contains("is a directory")));
        assert!(matches!(resolve("/etc/passwd"), Err(Error::CommandNotExecutable(_))));
        assert!(matches!(resolve("/nonexistent/x"), Err(Error::CommandNotFound(_))));
        assert!(matches!(
            resolve("gdrtrace-no-such-command"),
            Err(Error::CommandNotFound(_))
        ));
        assert!(matches!(resolve(""), Err(Error::CommandNotFound(_))));
        assert!(default_path().split(':').any(|d| Path::new(d).join("sh").exists()));
    }
}
