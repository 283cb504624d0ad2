//! The terminal while the view is up: raw mode and the alternate screen,
//! restored however the view ends (return, error, panic: `Drop` and a panic
//! hook, once), so the shell gets back its screen as it was. While the view
//! is up, standard error (when it is the same terminal) is held in a memory
//! file and printed after the screen is restored: a log line or a note from
//! the tracing loop can neither tear the view nor be lost.
use std::{
    io::{self, Write as _},
    os::fd::RawFd,
    sync::{
        Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use ratatui::{
    Terminal,
    backend::CrosstermBackend,
    crossterm::{
        cursor, execute,
        terminal::{EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode},
    },
};

/// Whether the terminal is in the view's mode (raw, alternate screen).
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Standard error while held: (the saved descriptor, the memory file).
static HELD: Mutex<Option<(RawFd, RawFd)>> = Mutex::new(None);

/// Whether both standard input (keys) and standard output (the screen) are
/// terminals.
pub fn interactive() -> bool {
    // SAFETY: isatty has no preconditions.
    unsafe { libc::isatty(0) == 1 && libc::isatty(1) == 1 }
}

fn hold_stderr() {
    // SAFETY: dup/memfd_create/dup2 on our own descriptors; on any failure
    // standard error is left as it was.
    unsafe {
        if libc::isatty(2) != 1 {
            return;
        }
        let saved = libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3);
        if saved < 0 {
            return;
        }
        let mem = libc::memfd_create(c"gdrtrace-top-stderr".as_ptr(), libc::MFD_CLOEXEC);
        if mem < 0 || libc::dup2(mem, 2) < 0 {
            if mem >= 0 {
                libc::close(mem);
            }
            libc::close(saved);
            return;
        }
        if let Ok(mut h) = HELD.lock() {
            *h = Some((saved, mem));
        }
    }
}

/// Puts standard error back and prints what was held.
fn release_stderr() {
    let Some((saved, mem)) = HELD.lock().ok().and_then(|mut h| h.take()) else {
        return;
    };
    // SAFETY: the descriptors `hold_stderr` made, used once here.
    unsafe {
        libc::dup2(saved, 2);
        libc::close(saved);
        libc::lseek(mem, 0, libc::SEEK_SET);
        let mut buf = [0u8; 8192];
        loop {
            let n = libc::read(mem, buf.as_mut_ptr().cast(), buf.len());
            if n <= 0 {
                break;
            }
            let _ = io::stderr().write_all(&buf[..n as usize]);
        }
        libc::close(mem);
    }
}

/// Leaves the view's mode, once: the screen as it was, the cursor shown,
/// the line discipline back, standard error back.
pub fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = disable_raw_mode();
        let _ = execute!(io::stdout(), LeaveAlternateScreen, cursor::Show);
    }
    release_stderr();
}

/// The terminal in the view's mode; restored when dropped.
pub struct Screen {
    pub terminal: Terminal<CrosstermBackend<io::Stdout>>,
}

impl Screen {
    pub fn enter() -> io::Result<Self> {
        static HOOK: std::sync::Once = std::sync::Once::new();
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                previous(info);
            }));
        });
        enable_raw_mode()?;
        ACTIVE.store(true, Ordering::SeqCst);
        if let Err(e) = execute!(io::stdout(), EnterAlternateScreen, cursor::Hide) {
            restore();
            return Err(e);
        }
        hold_stderr();
        match Terminal::new(CrosstermBackend::new(io::stdout())) {
            Ok(terminal) => Ok(Screen { terminal }),
            Err(e) => {
                restore();
                Err(e)
            }
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}
