//! Starting a traced command without a race: the child is forked, waits on
//! a pipe until the tracer has put its pid in the target set, then execs.
//! An exec failure comes back through a close-on-exec pipe, so "command not
//! found" is a clear error rather than a traced exit code 127.
use std::{
    ffi::CString,
    io,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
};

use crate::error::{Error, Result};

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

/// Forks `argv` held before exec.
pub fn spawn_gated(argv: &[String]) -> Result<Gated> {
    let Some(argv0) = argv.first() else {
        return Err(Error::Usage("no command given".into()));
    };
    let cargs: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()).map_err(|_| Error::Usage(format!("argument contains a NUL byte: {a:?}"))))
        .collect::<Result<_>>()?;
    let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let (gate_r, gate_w) = pipe().map_err(|e| Error::io("pipe", e))?;
    let (err_r, err_w) = pipe().map_err(|e| Error::io("pipe", e))?;
    // SAFETY: the child only calls async-signal-safe functions (read, execvp,
    // write, _exit) on memory prepared before the fork.
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
        argv0: argv0.clone(),
    })
}

impl Gated {
    /// Lets the child exec; reports an exec failure as an error.
    pub fn release(self) -> Result<u32> {
        let one = 1u8;
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
            return Err(Error::Usage(format!(
                "cannot run '{}': {}",
                self.argv0,
                io::Error::from_raw_os_error(errno)
            )));
        }
        Ok(self.pid)
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
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}
