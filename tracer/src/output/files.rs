//! Files named by flags: opened before anything starts, written when their
//! content is ready, moved to a fallback file when the named one fails
//! (whole files: `OutputFile`; streams: `StreamFile`), and checked to name
//! no input or other output (`check_distinct`).
use super::*;

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
        let cannot = |why: String| Error::Usage(format!("{flag} {}: cannot write: {why}", path.display()));
        let existed = match std::fs::metadata(path) {
            // open(2) of a socket fails with ENXIO, which says little.
            Ok(m) if m.file_type().is_socket() => return Err(cannot("it is a socket: name a file".into())),
            Ok(_) => true,
            Err(_) => std::fs::symlink_metadata(path).is_ok(),
        };
        // O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of
        // blocking the command before it starts; regular files ignore it.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| cannot(describe(&e)))?;
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

    /// Turns it into a stream (records appended as they come: `--jsonl`,
    /// `--record`, `--transfers`), its old content cleared.
    pub fn stream(mut self) -> StreamFile {
        self.fresh = false;
        let mut s = StreamFile {
            flag: self.flag,
            path: self.path.clone(),
            target: None,
            written: 0,
            spare: None,
            error: None,
        };
        let cleared = (|| -> io::Result<()> {
            if self.file.metadata()?.is_file() {
                self.file.set_len(0)?;
                self.file.rewind()?;
            }
            Ok(())
        })();
        match (cleared, self.file.try_clone()) {
            (Ok(()), Ok(f)) => s.target = Some(f),
            (Err(e), _) | (_, Err(e)) => s.fail(e),
        }
        s
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

    /// Writes `data` to a fallback file after `e` stopped the named one,
    /// and returns the error that says both.
    fn fallback(&self, data: &[u8], e: &io::Error) -> Error {
        let what = format!("{} {}: {}", self.flag, self.path.display(), describe(e));
        match fallback_file(&self.path).and_then(|(spare, mut f)| {
            f.write_all(data)?;
            f.flush()?;
            Ok(spare)
        }) {
            Ok(spare) => Error::Workload(format!("cannot write {what}; written to {} instead", spare.display())),
            Err(e2) => Error::Workload(format!(
                "cannot write {what}; the fallback file failed too: {}",
                describe(&e2)
            )),
        }
    }
}

/// A new directory of this process's own (mkdtemp(3): `PREFIX-` and a
/// random name, mode 0700, under `$TMPDIR` or `/tmp`).
pub fn private_dir(prefix: &str) -> io::Result<PathBuf> {
    let template = std::env::temp_dir().join(format!("{prefix}-XXXXXX"));
    let c = CString::new(template.as_os_str().as_bytes()).map_err(io::Error::other)?;
    let mut buf = c.into_bytes_with_nul();
    // SAFETY: mkdtemp rewrites the XXXXXX of a NUL-terminated buffer we own.
    if unsafe { libc::mkdtemp(buf.as_mut_ptr().cast()) }.is_null() {
        return Err(io::Error::last_os_error());
    }
    buf.pop();
    Ok(PathBuf::from(std::ffi::OsStr::from_bytes(&buf)))
}

/// The private directory of this process's fallback files (made once).
static SPARE_DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Creates a fallback file for an output that failed: in a directory of
/// this process's own (mkdtemp(3): a random name, mode 0700, under
/// `$TMPDIR` or `/tmp`), created with `O_CREAT|O_EXCL|O_NOFOLLOW` and mode
/// 0600, so neither a planted symlink nor another user's file can be
/// written through it. The file keeps the output's name. mkdtemp from the C
/// library rather than the `tempfile` crate: one call does it, and the
/// directory must outlive the process (tempfile removes its own).
pub fn fallback_file(output: &Path) -> io::Result<(PathBuf, File)> {
    let dir = {
        let mut slot = SPARE_DIR
            .lock()
            .map_err(|_| io::Error::other("fallback directory lock"))?;
        match slot.as_ref() {
            Some(d) => d.clone(),
            None => {
                let d = private_dir("gdrtrace")?;
                *slot = Some(d.clone());
                d
            }
        }
    };
    let name = output.file_name().map_or_else(|| "output".into(), |n| n.to_os_string());
    for i in 0u32.. {
        let mut n = name.clone();
        if i > 0 {
            n.push(format!(".{i}"));
        }
        let p = dir.join(&n);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&p)
        {
            Ok(f) => return Ok((p, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && i < 1000 => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("no free fallback file name"))
}

/// A streamed output (`--record`, `--transfers`, `--jsonl`): records are
/// appended as they come. Writing never fails: when the named file does,
/// what it holds so far is copied to a fallback file ([`fallback_file`])
/// and the rest of the stream goes there; [`StreamFile::finish`] says where
/// the whole stream is (one line, the flag and both paths).
#[derive(Debug)]
pub struct StreamFile {
    pub flag: &'static str,
    pub path: PathBuf,
    /// The named file, until it fails.
    target: Option<File>,
    /// Bytes the named file took.
    written: u64,
    spare: Option<Spare>,
    /// Why the named file stopped.
    error: Option<String>,
}

#[derive(Debug)]
struct Spare {
    path: PathBuf,
    file: Option<File>,
    /// Whether the spare holds the whole stream (the named file's part was
    /// copied back), or only what followed the failure (a pipe or a device
    /// took the first part).
    whole: bool,
    /// Why the fallback failed too; bytes lost then.
    error: Option<String>,
    lost: u64,
}

impl StreamFile {
    /// Creates (truncates) `path` as a stream: a file a later step creates
    /// (validate's workloads); `check_writable` refused it up front if it
    /// cannot be written.
    pub fn create(flag: &'static str, path: &Path) -> Result<Self> {
        OutputFile::open(flag, path).map(OutputFile::stream)
    }

    /// Where the stream is going now.
    pub fn failed(&self) -> bool {
        self.error.is_some()
    }

    /// The named file failed with `e`: its part is copied to a fallback
    /// file, which takes the rest.
    fn fail(&mut self, e: io::Error) {
        let target = self.target.take();
        self.error = Some(describe(&e));
        let mut spare = Spare {
            path: PathBuf::new(),
            file: None,
            whole: false,
            error: None,
            lost: 0,
        };
        match fallback_file(&self.path) {
            Ok((p, mut f)) => {
                spare.path = p;
                spare.whole = match &target {
                    Some(t) => copy_back(t, &self.path, self.written, &mut f).unwrap_or(false),
                    None => self.written == 0,
                };
                spare.file = Some(f);
            }
            Err(e2) => spare.error = Some(describe(&e2)),
        }
        self.spare = Some(spare);
    }

    /// Writes `buf` to the fallback (after the named file failed).
    fn spill(&mut self, buf: &[u8]) {
        if let Some(s) = &mut self.spare {
            match &mut s.file {
                Some(f) if s.error.is_none() => {
                    if let Err(e) = f.write_all(buf) {
                        s.error = Some(describe(&e));
                        s.lost += buf.len() as u64;
                    }
                }
                _ => s.lost += buf.len() as u64,
            }
        }
    }

    /// Closes the stream: Ok when the named file holds all of it; else the
    /// error says where it is (exit non-zero, the report is still printed).
    pub fn finish(mut self) -> Result<()> {
        if let Some(t) = &mut self.target
            && let Err(e) = t.flush()
        {
            self.fail(e);
        }
        let Some(why) = &self.error else { return Ok(()) };
        let what = format!("{} {}: {why}", self.flag, self.path.display());
        let Some(s) = &self.spare else { return Ok(()) };
        Err(Error::Workload(match (&s.error, s.whole) {
            (None, true) => format!("cannot write {what}; written to {} instead", s.path.display()),
            (None, false) => format!(
                "cannot write {what}; the first {} bytes went to {}, the rest written to {} instead",
                self.written,
                self.path.display(),
                s.path.display()
            ),
            (Some(e2), _) => format!(
                "cannot write {what}; the fallback file{} failed too ({e2}): {} bytes lost",
                if s.path.as_os_str().is_empty() {
                    String::new()
                } else {
                    format!(" {}", s.path.display())
                },
                s.lost
            ),
        }))
    }
}

/// Copies the first `n` bytes of the regular file `path` (the file `target`
/// is open on, checked by device and inode) to `to`; false when `target`
/// is not a regular file or cannot be read back.
fn copy_back(target: &File, path: &Path, n: u64, to: &mut File) -> io::Result<bool> {
    let meta = target.metadata()?;
    if !meta.is_file() {
        return Ok(n == 0);
    }
    let back = File::open(path)?;
    let m2 = back.metadata()?;
    if (m2.dev(), m2.ino()) != (meta.dev(), meta.ino()) {
        return Ok(false);
    }
    let copied = io::copy(&mut back.take(n), to)?;
    Ok(copied == n)
}

impl io::Write for StreamFile {
    /// Takes all of `buf`, always (see the type).
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut rest = buf;
        if let Some(t) = &mut self.target {
            while !rest.is_empty() {
                match t.write(rest) {
                    Ok(0) => {
                        self.fail(io::Error::from(io::ErrorKind::WriteZero));
                        break;
                    }
                    Ok(n) => {
                        self.written += n as u64;
                        rest = &rest[n..];
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        self.fail(e);
                        break;
                    }
                }
            }
        }
        if !rest.is_empty() {
            self.spill(rest);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
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

/// A path a command reads or writes, for [`check_distinct`].
#[derive(Clone, Copy, Debug)]
pub struct Named<'a> {
    /// The flag or argument (`--json`, `RECORDING`).
    pub flag: &'a str,
    pub path: &'a Path,
    pub output: bool,
}

impl<'a> Named<'a> {
    pub fn input(flag: &'a str, path: Option<&'a Path>) -> Option<Self> {
        path.map(|path| Named {
            flag,
            path,
            output: false,
        })
    }

    pub fn output(flag: &'a str, path: Option<&'a Path>) -> Option<Self> {
        path.map(|path| Named {
            flag,
            path,
            output: true,
        })
    }
}

/// What makes two paths the same file: device and inode for an existing
/// regular file, else the absolute path (a file to be created). Special
/// files (/dev/null, /dev/full, a FIFO, standard input `-`) may be named
/// twice.
#[derive(PartialEq, Eq)]
enum Identity {
    Inode(u64, u64),
    Path(PathBuf),
}

fn identity(p: &Path) -> Option<Identity> {
    if p == Path::new("-") {
        return None;
    }
    match std::fs::metadata(p) {
        Ok(m) if m.is_file() => Some(Identity::Inode(m.dev(), m.ino())),
        Ok(_) => None,
        Err(_) => {
            let abs = std::path::absolute(p).ok()?;
            let parent = abs.parent().and_then(|d| d.canonicalize().ok());
            Some(Identity::Path(match (parent, abs.file_name()) {
                (Some(d), Some(n)) => d.join(n),
                _ => abs,
            }))
        }
    }
}

/// Refuses, before anything is read, run or written, an output that names
/// an input or another output (`replay job.rec --json job.rec` would
/// replace the recording with its report): exit 2, one line naming both.
pub fn check_distinct(paths: &[Option<Named<'_>>]) -> Result<()> {
    let named: Vec<(Named<'_>, Identity)> = paths
        .iter()
        .flatten()
        .filter_map(|n| Some((*n, identity(n.path)?)))
        .collect();
    for (i, (a, ia)) in named.iter().enumerate() {
        for (b, ib) in &named[i + 1..] {
            if (a.output || b.output) && ia == ib {
                let (out, other) = if b.output { (b, a) } else { (a, b) };
                return Err(Error::Usage(format!(
                    "{} {} and {} {} are the same file: {} would overwrite {}; name another file",
                    a.flag,
                    a.path.display(),
                    b.flag,
                    b.path.display(),
                    out.flag,
                    if other.output { "the other output" } else { "the input" }
                )));
            }
        }
    }
    Ok(())
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
