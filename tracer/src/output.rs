//! Everything the binary writes. Standard output and standard error never
//! panic: a closed pipe (`gdrtrace replay job.rec | head -1`) ends printing
//! quietly and the command still writes the files its flags name, then
//! exits 141 (`error::exit::STDOUT_CLOSED`); any other write error is
//! reported once at the end. Files named by flags (`--json`, `--jsonl`,
//! `--html`, `--out`, ...) are opened before anything is started or loaded,
//! and one that cannot be written at the end goes to a fallback file named
//! on stderr, so a long job's results are never lost.
use std::{
    fmt,
    fs::File,
    io::{self, Seek as _, Write as _},
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
    sync::{
        Mutex,
        atomic::{AtomicU8, Ordering},
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

/// Writes to standard output (what `out!`/`outln!` expand to). Returns
/// false once standard output is closed or failed: nothing more is written.
pub fn stdout_fmt(args: fmt::Arguments<'_>) -> bool {
    if STDOUT.load(Ordering::Relaxed) != OPEN {
        return false;
    }
    match io::stdout().lock().write_fmt(args) {
        Ok(()) => true,
        Err(e) => {
            stdout_failed(&e);
            false
        }
    }
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
    let _ = io::stderr().lock().write_fmt(args);
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

/// A file named by a flag, opened when the command starts (before any BPF
/// is loaded or any command is run) and written when its content is ready.
#[derive(Debug)]
pub struct OutputFile {
    pub flag: &'static str,
    pub path: PathBuf,
    file: File,
    /// Created by `open` and not written since: removed when dropped (a
    /// command that fails first leaves no empty file behind).
    fresh: bool,
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if self.fresh {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl OutputFile {
    /// Opens `path` for writing, creating it but leaving its content until
    /// [`OutputFile::write`]. The error names the flag and is one line.
    pub fn open(flag: &'static str, path: &Path) -> Result<Self> {
        let existed = std::fs::symlink_metadata(path).is_ok();
        // O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of
        // blocking the command before it starts; regular files ignore it.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| Error::Usage(format!("{flag} {}: cannot write: {}", path.display(), describe(&e))))?;
        clear_nonblock(&file);
        Ok(OutputFile {
            flag,
            path: path.to_path_buf(),
            file,
            fresh: !existed,
        })
    }

    /// Opens it when the flag was given.
    pub fn open_opt(flag: &'static str, path: Option<&Path>) -> Result<Option<Self>> {
        path.map(|p| Self::open(flag, p)).transpose()
    }

    /// The open file, for appending records as they come (`--jsonl`).
    pub fn file(&mut self) -> &mut File {
        self.fresh = false;
        &mut self.file
    }

    /// Replaces the file's content with `data`. When that fails, `data` goes
    /// to a fallback file (named on stderr) and the error is returned, so
    /// the command exits non-zero without losing what it produced.
    pub fn write(mut self, data: &[u8]) -> Result<()> {
        self.fresh = false;
        let written = (|| -> io::Result<()> {
            if self.file.metadata()?.is_file() {
                self.file.set_len(0)?;
                self.file.rewind()?;
            }
            self.file.write_all(data)?;
            self.file.flush()
        })();
        match written {
            Ok(()) => Ok(()),
            Err(e) => Err(self.fallback(data, &e)),
        }
    }

    /// Writes `data` to a file in the temporary directory after `e` stopped
    /// the named one, and returns the error that says both.
    fn fallback(&self, data: &[u8], e: &io::Error) -> Error {
        let name = self
            .path
            .file_name()
            .map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
        let spare = std::env::temp_dir().join(format!("gdrtrace-{}-{name}", std::process::id()));
        let what = format!("{} {}: {}", self.flag, self.path.display(), describe(e));
        match std::fs::write(&spare, data) {
            Ok(()) => Error::Workload(format!("cannot write {what}; written to {} instead", spare.display())),
            Err(e2) => Error::Workload(format!(
                "cannot write {what}; the fallback {} failed too: {}",
                spare.display(),
                describe(&e2)
            )),
        }
    }
}

fn clear_nonblock(f: &File) {
    use std::os::fd::AsRawFd as _;
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let fl = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(f.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
        }
    }
}

/// Checks that a file a later step creates itself (`--record`,
/// `--transfers`) can be written, before anything starts.
pub fn check_writable(flag: &'static str, path: Option<&Path>) -> Result<()> {
    OutputFile::open_opt(flag, path).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwritable_targets_are_refused_at_open_and_full_disks_fall_back() {
        let e = OutputFile::open("--json", Path::new("/nonexistent-dir/x.json")).expect_err("no such directory");
        assert!(
            e.to_string()
                .starts_with("--json /nonexistent-dir/x.json: cannot write: ENOENT"),
            "{e}"
        );
        let dir = std::env::temp_dir();
        let e = OutputFile::open("--json", &dir).expect_err("a directory");
        assert!(e.to_string().contains("EISDIR"), "{e}");
        if Path::new("/dev/full").exists() {
            let f = OutputFile::open("--json", Path::new("/dev/full")).expect("/dev/full opens");
            let e = f.write(b"{\"report\": 1}").expect_err("ENOSPC");
            let msg = e.to_string();
            let spare = msg
                .rsplit_once("written to ")
                .map(|(_, p)| p.trim_end_matches(" instead"));
            let spare = spare.unwrap_or_else(|| panic!("no fallback named: {msg}"));
            assert_eq!(std::fs::read(spare).expect("fallback written"), b"{\"report\": 1}");
            let _ = std::fs::remove_file(spare);
        }
        let p = dir.join(format!("gdrtrace-output-test-{}", std::process::id()));
        std::fs::write(&p, b"older and longer content").expect("temp file");
        OutputFile::open("--json", &p)
            .expect("opens")
            .write(b"new")
            .expect("writes");
        assert_eq!(std::fs::read(&p).expect("reads"), b"new", "old content replaced");
        let _ = std::fs::remove_file(&p);
    }
}
