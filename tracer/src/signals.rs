//! SIGINT and SIGTERM, with where each came from.
//!
//! A signal from the terminal (Ctrl-C, `si_code == SI_KERNEL`) went to the
//! whole foreground process group, so a traced command already has it; one
//! sent with kill(2) (`SI_USER`, a job scheduler's SIGTERM) reached the
//! tracer alone. `run` forwards only the second kind, so a command that
//! handles its first Ctrl-C gracefully (shuts down cleanly, then exits)
//! does not get two. tokio's signal streams cannot tell them apart, hence
//! this: an `SA_SIGINFO` handler writes one byte per signal into a pipe
//! (write(2) is async-signal-safe), read through tokio's `AsyncFd` or poll(2).
use std::{
    io,
    os::fd::RawFd,
    sync::{
        OnceLock,
        atomic::{AtomicI32, Ordering},
    },
};

use crate::error::{Error, Result};

/// Write end of the pipe, for the handler.
static PIPE_W: AtomicI32 = AtomicI32::new(-1);
/// Read end, once the handlers are installed.
static PIPE_R: OnceLock<RawFd> = OnceLock::new();

/// Bit set in a pipe byte when the terminal sent the signal.
const FROM_TERMINAL: u8 = 0x80;

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: errno is thread-local; the handler restores it for the code
    // it interrupted. `info` is the kernel's siginfo for this delivery.
    unsafe {
        let errno = *libc::__errno_location();
        let from_terminal = !info.is_null() && (*info).si_code == libc::SI_KERNEL;
        let byte = (sig as u8 & 0x7f) | if from_terminal { FROM_TERMINAL } else { 0 };
        let fd = PIPE_W.load(Ordering::Relaxed);
        if fd >= 0 {
            libc::write(fd, (&byte as *const u8).cast(), 1);
        }
        *libc::__errno_location() = errno;
    }
}

/// One signal received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    pub signo: i32,
    /// Sent by the terminal to the whole foreground process group.
    pub from_terminal: bool,
}

impl Received {
    pub fn name(self) -> &'static str {
        match self.signo {
            libc::SIGINT => "SIGINT",
            libc::SIGTERM => "SIGTERM",
            _ => "signal",
        }
    }

    /// The status a shell reports for a process this signal ended.
    pub fn exit_code(self) -> i32 {
        128 + self.signo
    }
}

/// The process's SIGINT and SIGTERM, from the moment [`Signals::install`]
/// returns. Signals not read yet wait in the pipe (a Ctrl-C between two of
/// validate's workloads is seen by the next one).
#[derive(Debug, Clone, Copy)]
pub struct Signals {
    fd: RawFd,
}

impl Signals {
    /// Installs the handlers (once per process; later calls share them).
    pub fn install() -> io::Result<Self> {
        if let Some(fd) = PIPE_R.get() {
            return Ok(Signals { fd: *fd });
        }
        let mut fds = [0; 2];
        // SAFETY: a valid array for two descriptors.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        PIPE_W.store(fds[1], Ordering::Relaxed);
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: a zeroed sigaction with our handler; SA_RESTART so
            // other syscalls are not interrupted by the signal.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as *const () as usize;
                sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
                libc::sigemptyset(&mut sa.sa_mask);
                if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        let fd = *PIPE_R.get_or_init(|| fds[0]);
        Ok(Signals { fd })
    }

    /// The next signal already received, if any.
    pub fn try_recv(&self) -> Option<Received> {
        let mut b = 0u8;
        // SAFETY: reading one byte into a valid buffer from our pipe.
        let n = unsafe { libc::read(self.fd, (&mut b as *mut u8).cast(), 1) };
        (n == 1).then_some(Received {
            signo: i32::from(b & 0x7f),
            from_terminal: b & FROM_TERMINAL != 0,
        })
    }

    /// The next signal (inside a tokio runtime). Only one `recv` may be
    /// waiting at a time.
    pub async fn recv(&self) -> io::Result<Received> {
        if let Some(r) = self.try_recv() {
            return Ok(r);
        }
        // SAFETY: the pipe's read end stays open for the life of the process.
        let afd = unsafe { tokio::io::unix::AsyncFd::register_with_interest(self.fd, tokio::io::Interest::READABLE) }
            .map_err(|e| e.into_parts().1)?;
        loop {
            let mut ready = afd.readable().await?;
            if let Some(r) = self.try_recv() {
                return Ok(r);
            }
            ready.clear_ready();
        }
    }

    /// The pipe's read end, for poll(2) (see `spawn::Child::wait_or_signal`).
    pub fn fd(&self) -> RawFd {
        self.fd
    }
}

/// A single-threaded tokio runtime: the tracer forks traced commands, and
/// one thread keeps that safe and the overhead small.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("starting the tokio runtime", e))
}

/// Completes on `--duration`, Ctrl-C (SIGINT) or SIGTERM, whichever first
/// (`attach`'s stop). The handlers are installed when this is called, not
/// when the future is first polled, so a signal that arrives right after
/// the caller announces readiness is not lost.
pub fn stop_signal(duration: Option<std::time::Duration>) -> Result<impl std::future::Future<Output = ()>> {
    let signals = Signals::install().map_err(|e| Error::io("installing the SIGINT and SIGTERM handlers", e))?;
    Ok(async move {
        let sleep = async {
            match duration {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = sleep => {}
            _ = signals.recv() => {}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A signal sent with kill(2) arrives as "not from the terminal".
    #[test]
    fn kill_is_not_from_the_terminal() {
        let s = Signals::install().expect("installs");
        while s.try_recv().is_some() {}
        // SAFETY: signalling ourselves; the handler is installed.
        unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
        let mut got = None;
        for _ in 0..100 {
            got = s.try_recv();
            if got.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let got = got.expect("SIGTERM delivered through the pipe");
        assert_eq!(got.signo, libc::SIGTERM);
        assert!(!got.from_terminal, "kill(2) is SI_USER");
        assert_eq!(got.exit_code(), 143);
    }
}
