//! The one reader of input files, for every command that takes them:
//! reports and recordings (`explain`, `replay`), baselines (`compare`,
//! `baseline record --from`), thresholds (`--thresholds`) and NCCL logs
//! (`--nccl-log`).
//!
//! - Regular files only, or `-` for standard input (a pipe or a file): a
//!   FIFO, device or directory is refused before anything is read (a FIFO
//!   would block forever, /dev/zero never ends).
//! - At most `--max-input-size` bytes (default 1 GiB) are read, counted
//!   after decompression; a regular file larger than that is refused from
//!   its size, before reading.
//! - gzip is recognised by its magic bytes, whatever the file is called.
//! - Text only: a NUL byte in the first block (a sparse or binary file)
//!   ends the read at once; lines are bounded (`MAX_LINE`).
//! - Every failure is `Error::Input` naming the file: exit 2 in every command.
use std::{
    cell::Cell,
    fs::File,
    io::{self, BufRead, BufReader, Read},
    os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _},
    path::Path,
    rc::Rc,
    sync::atomic::{AtomicU64, Ordering},
};

use crate::{
    error::{Error, MAX_LINE as MAX_ERROR, Result, cut_middle, describe},
    units::bytes_limit,
};

/// Default of `--max-input-size`.
pub const DEFAULT_LIMIT: u64 = 1 << 30;

/// The longest line a line-oriented input (recording, NCCL log) may have.
/// A recording's longest lines (kernel aggregates, workload summaries) are
/// a few KiB; this only stops a file with no newline from filling memory.
pub const MAX_LINE: usize = 16 << 20;

static LIMIT: AtomicU64 = AtomicU64::new(DEFAULT_LIMIT);

/// Sets the input size limit (`--max-input-size`).
pub fn set_limit(bytes: u64) {
    LIMIT.store(bytes, Ordering::Relaxed);
}

pub fn limit() -> u64 {
    LIMIT.load(Ordering::Relaxed)
}

/// Counts bytes and fails past the limit, remembering that it did.
struct Bounded<R> {
    inner: R,
    left: u64,
    over: Rc<Cell<bool>>,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            // One byte more than the limit allows tells "exactly at the
            // limit" from "over it".
            let mut one = [0u8; 1];
            return match self.inner.read(&mut one)? {
                0 => Ok(0),
                _ => {
                    self.over.set(true);
                    Err(io::Error::other(format!(
                        "over the input size limit of {} (raise it with --max-input-size)",
                        bytes_limit(limit())
                    )))
                }
            };
        }
        let want = buf.len().min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.left -= n as u64;
        Ok(n)
    }
}

/// An open input: read it through `Read`/`BufRead`; turn parse errors into
/// one-line errors naming it with [`Input::error`].
pub struct Input {
    name: String,
    reader: Box<dyn BufRead>,
    over: Rc<Cell<bool>>,
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Input")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

fn kind_of(ft: &std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

impl Input {
    /// Opens `path` (`-`: standard input).
    pub fn open(path: &Path) -> Result<Self> {
        let limit = limit();
        let (name, raw): (String, Box<dyn Read>) = if path == Path::new("-") {
            let name = "standard input".to_string();
            let meta = File::from(
                std::os::fd::AsFd::as_fd(&io::stdin())
                    .try_clone_to_owned()
                    .map_err(|e| Error::Input(format!("cannot read {name}: {}", describe(&e))))?,
            )
            .metadata()
            .map_err(|e| Error::Input(format!("cannot read {name}: {}", describe(&e))))?;
            let ft = meta.file_type();
            if !(ft.is_file() || ft.is_fifo() || ft.is_socket()) {
                return Err(Error::Input(format!(
                    "{name} is {}: give a file, or pipe one into gdrtrace",
                    kind_of(&ft)
                )));
            }
            (name, Box::new(io::stdin()))
        } else {
            let name = path.display().to_string();
            // open(2) of a socket fails with ENXIO, which says little.
            if let Ok(m) = std::fs::metadata(path)
                && m.file_type().is_socket()
            {
                return Err(Error::Input(format!(
                    "{name} is a socket: only regular files are read (or - for standard input)"
                )));
            }
            // O_NONBLOCK: opening a FIFO must not wait for a writer (it is
            // refused below); regular files ignore the flag.
            let file = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
                .open(path)
                .map_err(|e| Error::Input(format!("cannot read {name}: {}", describe(&e))))?;
            let meta = file
                .metadata()
                .map_err(|e| Error::Input(format!("cannot read {name}: {}", describe(&e))))?;
            if !meta.is_file() {
                return Err(Error::Input(format!(
                    "{name} is {}: only regular files are read (or - for standard input)",
                    kind_of(&meta.file_type())
                )));
            }
            if meta.len() > limit {
                return Err(Error::Input(format!(
                    "{name} is {}, over the input size limit of {} (raise it with --max-input-size)",
                    bytes_limit(meta.len()),
                    bytes_limit(limit)
                )));
            }
            (name, Box::new(file))
        };
        let over = Rc::new(Cell::new(false));
        let mut plain = BufReader::new(Bounded {
            inner: raw,
            left: limit,
            over: over.clone(),
        });
        let head = plain
            .fill_buf()
            .map_err(|e| Error::Input(format!("cannot read {name}: {}", describe(&e))))?;
        let reader: Box<dyn BufRead> = if head.starts_with(&[0x1f, 0x8b]) {
            Box::new(BufReader::new(Bounded {
                inner: flate2::bufread::MultiGzDecoder::new(plain),
                left: limit,
                over: over.clone(),
            }))
        } else {
            Box::new(plain)
        };
        let mut input = Input { name, reader, over };
        let binary = input
            .reader
            .fill_buf()
            .map(|h| h.contains(&0))
            .map_err(|e| gzip_hint(&e));
        if binary.map_err(|e| input.error(e))? {
            return Err(Error::Input(format!(
                "{} is not text (it holds NUL bytes: a binary or sparse file)",
                input.name
            )));
        }
        Ok(input)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Refuses an input with nothing in it (after decompression): the one
    /// message every reader of reports, recordings and baselines gives.
    pub fn refuse_empty(&mut self) -> Result<()> {
        match self.reader.fill_buf() {
            Ok([]) => Err(Error::Input(format!("{} is empty", self.name))),
            _ => Ok(()),
        }
    }

    /// A one-line error about this input: the size limit when it was hit
    /// (whatever the parser made of the cut), else `msg`.
    pub fn error(&self, msg: impl std::fmt::Display) -> Error {
        if self.over.get() {
            Error::Input(format!(
                "{}: over the input size limit of {} (raise it with --max-input-size)",
                self.name,
                bytes_limit(limit())
            ))
        } else {
            let msg = msg.to_string();
            let msg = msg.lines().next().unwrap_or("");
            Error::Input(format!("{}: {}", self.name, cut_middle(msg, MAX_ERROR)))
        }
    }

    /// Puts `prefix` back in front of what is left (a line read to decide
    /// what the input is).
    pub fn unread(&mut self, prefix: Vec<u8>) {
        let rest = std::mem::replace(&mut self.reader, Box::new(io::empty()));
        self.reader = Box::new(io::Cursor::new(prefix).chain(rest));
    }

    /// The whole input as text.
    pub fn read_string(mut self) -> Result<String> {
        let mut bytes = Vec::new();
        self.reader
            .read_to_end(&mut bytes)
            .map_err(|e| self.error(gzip_hint(&e)))?;
        String::from_utf8(bytes).map_err(|_| self.error("not text (not UTF-8)"))
    }

    /// The next line (without its newline), at most `MAX_LINE` bytes;
    /// `None` at the end. Errors are plain strings, for parsers that add
    /// the line number; [`Input::error`] turns them into the final error.
    pub fn next_line(&mut self, buf: &mut String) -> std::result::Result<Option<()>, LineError> {
        next_line(&mut self.reader, buf)
    }
}

/// Why [`next_line`] gave no line.
#[derive(Debug, PartialEq, Eq)]
pub enum LineError {
    /// This line is not text or too long; it was read to its end, so the
    /// next line can be read (a reader that skips damaged lines may).
    Line(String),
    /// The input itself failed (a read error, gzip, the size limit).
    Read(String),
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LineError::Line(e) | LineError::Read(e) => f.write_str(e),
        }
    }
}

/// The next line of `r` (see [`Input::next_line`]).
pub fn next_line(r: &mut dyn BufRead, buf: &mut String) -> std::result::Result<Option<()>, LineError> {
    buf.clear();
    let mut bytes = Vec::new();
    let read = |e: io::Error| LineError::Read(gzip_hint(&e));
    let n = r
        .take(MAX_LINE as u64 + 1)
        .read_until(b'\n', &mut bytes)
        .map_err(read)?;
    if n == 0 {
        return Ok(None);
    }
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
    } else if bytes.len() > MAX_LINE {
        r.skip_until(b'\n').map_err(read)?;
        return Err(LineError::Line(format!(
            "a line longer than {}",
            bytes_limit(MAX_LINE as u64)
        )));
    }
    *buf = String::from_utf8(bytes).map_err(|_| LineError::Line("not text (not UTF-8)".into()))?;
    Ok(Some(()))
}

/// gzip's errors say little ("corrupt deflate stream"); say it was gzip.
fn gzip_hint(e: &io::Error) -> String {
    let s = e.to_string();
    if matches!(
        e.kind(),
        io::ErrorKind::InvalidInput | io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof
    ) && !s.contains("limit")
    {
        format!("not a complete gzip file: {s}")
    } else {
        s
    }
}

impl Read for Input {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.reader.read(buf)
    }
}

impl BufRead for Input {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.reader.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        self.reader.consume(amt)
    }
}

/// The whole of `path` as text, through [`Input`].
pub fn read_to_string(path: &Path) -> Result<String> {
    Input::open(path)?.read_string()
}

/// Reads a JSON document from `path` through [`Input`], streaming.
pub fn read_json(path: &Path) -> Result<serde_json::Value> {
    let mut input = Input::open(path)?;
    json_of(&mut input)
}

/// The `schema` field of a JSON document, `null` when it has none: the tag
/// that says which typed reader reads the rest (a report, a baseline, a
/// recording header), looked at before anything else is.
pub fn schema_of(v: &serde_json::Value) -> &serde_json::Value {
    v.get("schema").unwrap_or(&serde_json::Value::Null)
}

/// The memory this process has, and what it may still take.
#[derive(Clone, Copy, Debug)]
pub struct Memory {
    /// What the bound counts: its address space (`VmSize`) under an
    /// RLIMIT_AS, else its resident memory.
    pub used: u64,
    /// What is left: to the RLIMIT_AS, else the machine's MemAvailable.
    pub left: u64,
    pub bound: &'static str,
}

/// This process's memory now; None: unknown.
pub fn memory() -> Option<Memory> {
    // /proc/self/statm: size resident ... in pages.
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let mut pages = statm.split_whitespace().map(|f| f.parse::<u64>().ok());
    // SAFETY: sysconf has no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let (size, resident) = (pages.next()?? * page, pages.next()?? * page);
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the limit into `lim`, which it may.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut lim) } == 0 && lim.rlim_cur != libc::RLIM_INFINITY {
        return Some(Memory {
            used: size,
            left: lim.rlim_cur.saturating_sub(size),
            bound: "under its address-space limit, RLIMIT_AS",
        });
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let avail = meminfo.lines().find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let kib = avail.trim().trim_end_matches("kB").trim().parse::<u64>().ok()?;
    Some(Memory {
        used: resident,
        left: kib * 1024,
        bound: "available on this machine, MemAvailable",
    })
}

/// How often, in bytes read, a document's parse looks at the memory.
const MEMORY_EVERY: u64 = 256 << 10;
/// What a parse may take between two looks (256 KiB of the worst JSON,
/// arrays of one-digit numbers, is ~12 MiB of values), plus what a vector
/// below glibc's largest mmap threshold (32 MiB) takes twice as it moves.
const MEMORY_MARGIN: u64 = 80 << 20;

/// A document's bytes, read while its parse can still grow: the parse has
/// taken `grown` since it began, and a vector it holds (at most that) may
/// grow by as much again at once. Past that, the read fails (one line,
/// never an allocation abort).
pub struct Guarded<'a> {
    inner: &'a mut Input,
    at_start: Option<Memory>,
    since_look: u64,
    /// Bytes read, and the memory when the read was stopped.
    read: &'a Cell<u64>,
    hit: &'a Cell<Option<(Memory, u64)>>,
}

impl Read for Guarded<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.set(self.read.get() + n as u64);
        self.since_look += n as u64;
        if self.since_look >= MEMORY_EVERY {
            self.since_look = 0;
            if let (Some(start), Some(now)) = (self.at_start, memory()) {
                let grown = now.used.saturating_sub(start.used);
                if now.left < grown + MEMORY_MARGIN {
                    self.hit.set(Some((now, grown)));
                    return Err(io::Error::other("over the memory bound"));
                }
            }
        }
        Ok(n)
    }
}

/// The serde_json deserializer [`parse_json`] hands its reader.
pub type JsonDe<'a> = serde_json::Deserializer<serde_json::de::IoRead<BufReader<Guarded<'a>>>>;

/// Why [`parse_json`] read no document.
#[derive(Debug)]
pub enum JsonError {
    /// The input failed, is not JSON or did not fit in memory: the final
    /// one-line error, naming the file.
    Input(Error),
    /// The JSON is not what the reader reads: where (the field's path,
    /// `.` for the whole) and why.
    Data { path: String, error: serde_json::Error },
}

/// Parses the rest of `input` as one JSON document with `read`, streaming
/// (a typed reader builds its values as it goes, no tree first). An empty,
/// truncated or invalid document, the size limit and a document whose parse
/// would not fit in the memory this process may take ([`Guarded`]) are
/// one-line errors naming the file.
pub fn parse_json<T>(
    input: &mut Input,
    read: impl FnOnce(&mut JsonDe<'_>) -> std::result::Result<T, serde_path_to_error::Error<serde_json::Error>>,
) -> std::result::Result<T, JsonError> {
    use serde_json::error::Category;
    input.refuse_empty().map_err(JsonError::Input)?;
    let empty = input
        .fill_buf()
        .map(|b| b.iter().all(u8::is_ascii_whitespace) && b.len() < 4096)
        .unwrap_or(false);
    let (read_bytes, hit) = (Cell::new(0), Cell::new(None));
    let guarded = Guarded {
        inner: &mut *input,
        at_start: memory(),
        since_look: 0,
        read: &read_bytes,
        hit: &hit,
    };
    // Buffered here: serde_json reads its input a byte at a time.
    let mut de = serde_json::Deserializer::from_reader(BufReader::with_capacity(64 << 10, guarded));
    let v = match read(&mut de) {
        Ok(v) => de.end().map(|()| v).map_err(|e| (String::new(), e)),
        Err(e) => Err((e.path().to_string(), e.into_inner())),
    };
    drop(de);
    let (hit, read_bytes) = (hit.get(), read_bytes.get());
    v.map_err(|(path, e)| {
        if input.over.get() {
            return JsonError::Input(input.error(""));
        }
        let what = if let Some((m, grown)) = hit {
            format!(
                "is too large to parse in the memory this process may take: the first {} took {}, and {} is left ({}): raise the limit or read a smaller report",
                bytes_limit(read_bytes),
                bytes_limit(grown),
                bytes_limit(m.left),
                m.bound
            )
        } else {
            match e.classify() {
                Category::Eof if empty && e.line() <= 1 && e.column() == 0 => "is empty".to_string(),
                Category::Eof => format!("is truncated ({e})"),
                Category::Io => return JsonError::Input(input.error(e)),
                Category::Syntax => format!("is not valid JSON ({e})"),
                Category::Data => return JsonError::Data { path, error: e },
            }
        };
        JsonError::Input(Error::Input(format!("{} {what}", input.name)))
    })
}

/// serde_json's message without the position it appends (`at line L column
/// C`), for documents whose positions say nothing (a one-line record, a
/// value already named by its field).
pub fn json_message(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    let at = format!(" at line {} column {}", e.line(), e.column());
    match msg.strip_suffix(&at) {
        Some(m) => m.to_string(),
        None => msg,
    }
}

/// Parses the rest of `input` as one JSON value (a tree: for documents
/// kept as they are, baselines); errors as [`parse_json`]'s.
pub fn json_of(input: &mut Input) -> Result<serde_json::Value> {
    parse_json(input, |de| serde_path_to_error::deserialize(de)).map_err(|e| match e {
        JsonError::Input(e) => e,
        // A JSON value takes any JSON.
        JsonError::Data { error, .. } => input.error(error),
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    fn temp(name: &str, data: &[u8]) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("gdrtrace-input-{}-{name}", std::process::id()));
        std::fs::write(&p, data).expect("temp file");
        p
    }

    #[test]
    fn regular_files_plain_or_gzip_within_the_limit() {
        let text = "{\"a\": 1}\nsecond line\n";
        let plain = temp("plain", text.as_bytes());
        assert_eq!(read_to_string(&plain).expect("plain"), text);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(text.as_bytes()).expect("compress");
        let gz_path = temp("gz.rec", &gz.finish().expect("compress"));
        assert_eq!(read_to_string(&gz_path).expect("gzip by magic"), text);
        let mut input = Input::open(&gz_path).expect("opens");
        let mut line = String::new();
        assert_eq!(input.next_line(&mut line), Ok(Some(())));
        assert_eq!(line, "{\"a\": 1}");

        let e = Input::open(&std::env::temp_dir()).expect_err("a directory");
        assert!(e.to_string().contains("is a directory"), "{e}");
        let e = Input::open(Path::new("/dev/zero")).expect_err("a device");
        assert!(e.to_string().contains("character device"), "{e}");
        let e = Input::open(Path::new("/nonexistent/x")).expect_err("missing");
        assert!(e.to_string().contains("ENOENT"), "{e}");
        let nul = temp("nul", &[0u8; 64]);
        let e = Input::open(&nul).expect_err("binary");
        assert!(e.to_string().contains("NUL bytes"), "{e}");
        let cut = temp("cut.gz", &[0x1f, 0x8b, 8, 0, 0, 0]);
        let e = read_to_string(&cut).expect_err("truncated gzip");
        assert!(e.to_string().contains("gzip"), "{e}");
        for p in [plain, gz_path, nul, cut] {
            let _ = std::fs::remove_file(p);
        }
    }

    #[test]
    fn bounded_counts_bytes_past_the_limit() {
        let over = Rc::new(Cell::new(false));
        let mut b = Bounded {
            inner: &b"0123456789"[..],
            left: 10,
            over: over.clone(),
        };
        let mut all = Vec::new();
        b.read_to_end(&mut all).expect("exactly at the limit is fine");
        assert_eq!(all.len(), 10);
        assert!(!over.get());
        let mut b = Bounded {
            inner: &b"0123456789x"[..],
            left: 10,
            over: over.clone(),
        };
        assert!(b.read_to_end(&mut Vec::new()).is_err());
        assert!(over.get(), "one byte over is over");
    }

    #[test]
    fn long_lines_are_cut_off() {
        let mut long = vec![b'x'; MAX_LINE + 2];
        long.extend(b"\nnext\n");
        let mut r = io::Cursor::new(long);
        let mut line = String::new();
        let e = next_line(&mut r, &mut line).expect_err("too long");
        assert!(matches!(&e, LineError::Line(m) if m.contains("longer than")), "{e}");
        // Read to its end: the next line is whole.
        assert_eq!(next_line(&mut r, &mut line), Ok(Some(())));
        assert_eq!(line, "next");
    }
}
