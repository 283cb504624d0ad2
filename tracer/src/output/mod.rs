//! Everything the binary writes. Standard output and standard error never
//! panic: a closed pipe (`gdrtrace replay job.rec | head -1`) ends printing
//! quietly and the command still writes the files its flags name, then
//! exits 141 (`error::exit::STDOUT_CLOSED`); any other write error is
//! reported once at the end. Files named by flags (`--json`, `--jsonl`,
//! `--html`, `--out`, `--record`, `--transfers`, ...) are opened before
//! anything is started or loaded, none may name an input or another output
//! ([`check_distinct`]), and one that cannot be written, at the end or in
//! the middle of a stream, goes to a fallback file named on stderr
//! ([`fallback_file`]), so a long job's results are never lost.
//!
//! Everything printed on standard output and standard error goes through
//! [`escape`]: a process name, path or argument that came from a traced
//! process or a file cannot move the cursor or retitle the terminal.
use std::{
    borrow::Cow,
    ffi::CString,
    fmt,
    fs::File,
    io::{self, Read as _, Seek as _, Write as _},
    os::unix::{
        ffi::OsStrExt as _,
        fs::{FileTypeExt as _, MetadataExt as _, OpenOptionsExt as _},
    },
    path::{Path, PathBuf},
    sync::{
        Mutex,
        atomic::{AtomicI32, AtomicU8, Ordering},
    },
};

use crate::error::{Error, Result, describe};

const OPEN: u8 = 0;
const CLOSED: u8 = 1;
const FAILED: u8 = 2;

/// State of standard output: open, closed by the reader (EPIPE), or failed.
static STDOUT: AtomicU8 = AtomicU8::new(OPEN);
static STDOUT_ERROR: Mutex<Option<String>> = Mutex::new(None);

fn stdout_failed(e: &io::Error) {
    if e.kind() == io::ErrorKind::BrokenPipe {
        STDOUT.store(CLOSED, Ordering::Relaxed);
    } else {
        STDOUT.store(FAILED, Ordering::Relaxed);
        if let Ok(mut slot) = STDOUT_ERROR.lock() {
            slot.get_or_insert_with(|| describe(e));
        }
    }
}

/// Where the one JSON document of a `--format json` command goes once
/// [`text_to_stderr`] moved everything else off standard output (-1: not moved).
static DOCUMENT_FD: AtomicI32 = AtomicI32::new(-1);

/// From now on standard output is for the one document [`document`] prints
/// (`--format json`): descriptor 1 is pointed at standard error, so the
/// command's text and that of the workloads it starts (which inherit it)
/// go there, and the document goes to the original standard output.
pub fn text_to_stderr() {
    use std::os::fd::AsRawFd as _;
    flush_stdout();
    if DOCUMENT_FD.load(Ordering::Relaxed) >= 0 {
        return;
    }
    // SAFETY: fcntl and dup2 on the process's own standard descriptors.
    unsafe {
        let saved = libc::fcntl(io::stdout().as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3);
        if saved < 0 {
            return;
        }
        if libc::dup2(io::stderr().as_raw_fd(), io::stdout().as_raw_fd()) < 0 {
            libc::close(saved);
            return;
        }
        DOCUMENT_FD.store(saved, Ordering::Relaxed);
    }
}

/// Prints a command's JSON document on (the original) standard output,
/// with a newline.
pub fn document(json: &str) -> bool {
    use std::os::fd::FromRawFd as _;
    let fd = DOCUMENT_FD.load(Ordering::Relaxed);
    if fd < 0 {
        return write_stdout(format_args!("{json}\n"));
    }
    if STDOUT.load(Ordering::Relaxed) != OPEN {
        return false;
    }
    // SAFETY: our own descriptor, kept open for the life of the process
    // (ManuallyDrop: the File does not close it).
    let mut f = std::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(fd) });
    match f.write_all(json.as_bytes()).and_then(|()| f.write_all(b"\n")) {
        Ok(()) => true,
        Err(e) => {
            stdout_failed(&e);
            false
        }
    }
}

/// Prints `v` as the command's JSON document (`--format json`); the error
/// names `what`.
pub fn print_json<T: serde::Serialize>(what: &str, v: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(v).map_err(|e| Error::Workload(format!("encoding {what}: {e}")))?;
    document(&text);
    Ok(())
}

/// Writes to standard output (what `out!`/`outln!` expand to). Returns
/// false once standard output is closed or failed: nothing more is written.
pub fn stdout_fmt(args: fmt::Arguments<'_>) -> bool {
    write_stdout(args)
}

fn write_stdout(args: fmt::Arguments<'_>) -> bool {
    if STDOUT.load(Ordering::Relaxed) != OPEN {
        return false;
    }
    let text = fmt::format(args);
    beside_status(|| {
        // Standard output is line-buffered: a line is out before the status
        // line is drawn again.
        match io::stdout().lock().write_all(escape(&text).as_bytes()) {
            Ok(()) => true,
            Err(e) => {
                stdout_failed(&e);
                false
            }
        }
    })
}

/// The live status line at the bottom of standard error (`progress`), if
/// one is shown: what every write to stdout or stderr clears first and
/// draws again after, so that lines never land inside it.
static STATUS: Mutex<Option<String>> = Mutex::new(None);

/// Shows `line` as the live status line on standard error (only where it
/// is a terminal: `progress` decides), or clears it (None).
pub fn set_status(line: Option<String>) {
    let Ok(mut status) = STATUS.lock() else { return };
    let mut err = io::stderr().lock();
    let _ = err.write_all(b"\r\x1b[K");
    if let Some(l) = &line {
        let _ = err.write_all(escape(l).as_bytes());
    }
    let _ = err.flush();
    *status = line;
}

/// Runs `write` with the status line (if any) cleared, and draws it again after.
fn beside_status<T>(write: impl FnOnce() -> T) -> T {
    let status = STATUS.lock();
    let shown = status.as_ref().ok().and_then(|s| s.as_deref());
    if shown.is_some() {
        let _ = io::stderr().lock().write_all(b"\r\x1b[K");
    }
    let r = write();
    if let Some(l) = shown {
        let mut err = io::stderr().lock();
        let _ = err.write_all(escape(l).as_bytes());
        let _ = err.flush();
    }
    r
}

/// Flushes standard output (at the end, and before a long wait).
pub fn flush_stdout() {
    if STDOUT.load(Ordering::Relaxed) == OPEN
        && let Err(e) = io::stdout().lock().flush()
    {
        stdout_failed(&e);
    }
}

/// Whether the reader of standard output went away (EPIPE).
pub fn stdout_closed() -> bool {
    STDOUT.load(Ordering::Relaxed) == CLOSED
}

/// The error that stopped standard output, other than a closed pipe.
pub fn stdout_error() -> Option<String> {
    STDOUT_ERROR.lock().ok().and_then(|s| s.clone())
}

/// Writes to standard error; a failure is ignored (there is nowhere left
/// to report it), never a panic as with `eprintln!`.
pub fn stderr_fmt(args: fmt::Arguments<'_>) {
    let text = fmt::format(args);
    beside_status(|| {
        let _ = io::stderr().lock().write_all(escape(&text).as_bytes());
    });
}

/// The one escaping of printed text: control characters other than newline
/// and tab become visible escapes, so that a name from a traced process or
/// a file (`e\x1b]0;PWN\x07`) is shown, never obeyed by the terminal. C0
/// controls print as `\x1b`; DEL and the C1 controls (U+0080 to U+009F,
/// which some terminals take as escape sequences too) as `\u009b`, which
/// is also what JSON reads back as the same character (JSON printed on
/// stdout stays valid; serde_json already writes C0 controls as `\u001b`).
/// Files named by flags (`--json`, `--record`) keep the raw values.
pub fn escape(s: &str) -> Cow<'_, str> {
    // `is_control`: C0, DEL and C1 (Unicode category Cc).
    let bad = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !s.chars().any(bad) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            c if !bad(c) => out.push(c),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{:04x}", c as u32)),
        }
    }
    Cow::Owned(out)
}

/// `print!` that never panics (see [`stdout_fmt`]).
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => { $crate::output::stdout_fmt(format_args!($($t)*)) };
}

/// `println!` that never panics (see [`stdout_fmt`]).
#[macro_export]
macro_rules! outln {
    () => { $crate::output::stdout_fmt(format_args!("\n")) };
    ($($t:tt)*) => { $crate::output::stdout_fmt(format_args!("{}\n", format_args!($($t)*))) };
}

/// `eprintln!` that never panics (see [`stderr_fmt`]).
#[macro_export]
macro_rules! errln {
    ($($t:tt)*) => { $crate::output::stderr_fmt(format_args!("{}\n", format_args!($($t)*))) };
}

mod files;
pub use self::files::*;
