//! The recorder: an observer of the aggregator's inputs, one line each.
use flate2::{Compression, write::GzEncoder};

use super::{codec::Beat, *};

/// Whether a recording named `path` is written gzip-compressed: its name
/// ends in `.gz` (readers take either, by the gzip magic bytes).
pub fn gzipped(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "gz")
}

/// Where a recording's lines go: the stream, through gzip when its name
/// says so (compressed into a buffer emptied into the stream every 64 KiB).
#[derive(Debug)]
enum Sink {
    Plain(BufWriter<StreamFile>),
    Gzip { gz: GzEncoder<Vec<u8>>, out: StreamFile },
}

const BUFFER: usize = 1 << 16;

impl Sink {
    fn new(out: StreamFile) -> Self {
        if gzipped(&out.path) {
            Sink::Gzip {
                gz: GzEncoder::new(Vec::with_capacity(BUFFER), Compression::default()),
                out,
            }
        } else {
            Sink::Plain(BufWriter::with_capacity(BUFFER, out))
        }
    }

    /// Ends the gzip stream where there is one; the stream back, and the
    /// error that kept its end from being written.
    fn finish(self) -> (StreamFile, Option<std::io::Error>) {
        match self {
            // A StreamFile takes every byte: the flush cannot fail.
            Sink::Plain(out) => match out.into_inner() {
                Ok(s) => (s, None),
                Err(e) => (e.into_inner().into_parts().0, None),
            },
            Sink::Gzip { gz, mut out } => match gz.finish() {
                // A StreamFile takes every byte (or moves to its fallback file).
                Ok(rest) => {
                    let _ = out.write_all(&rest);
                    (out, None)
                }
                Err(e) => (out, Some(e)),
            },
        }
    }
}

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::Plain(w) => w.write(buf),
            Sink::Gzip { gz, out } => {
                let n = gz.write(buf)?;
                if gz.get_ref().len() >= BUFFER {
                    out.write_all(&std::mem::take(gz.get_mut()))?;
                }
                Ok(n)
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Plain(w) => w.flush(),
            Sink::Gzip { out, .. } => out.flush(),
        }
    }
}

/// Writes a recording while tracing. Write errors are kept and reported
/// once, when the recording is finished.
#[derive(Debug)]
pub struct Recorder {
    /// A stream (gzip when named `*.gz`): a write error moves the recording
    /// to a fallback file (`output::StreamFile`); `error` holds
    /// serialization errors.
    out: Sink,
    error: Option<std::io::Error>,
    /// A trigger (tick, alive check) written only if facts follow it.
    lazy: Option<(&'static str, Beat)>,
    last_aggregates: Vec<(AggKey, u64, u64)>,
    /// A `duty` line was written since the last totals: the next totals get
    /// a line even where they did not change (`clock`).
    duty_since_totals: bool,
    last_sample: BTreeMap<u32, (Option<u64>, Option<f64>)>,
    pub events: u64,
}

impl Recorder {
    pub fn create(out: StreamFile, header: &Header) -> Result<Self> {
        let mut r = Recorder {
            out: Sink::new(out),
            error: None,
            lazy: None,
            last_aggregates: Vec::new(),
            duty_since_totals: false,
            last_sample: BTreeMap::new(),
            events: 0,
        };
        let h = line_json("header", header).map_err(|e| Error::Workload(format!("recording header: {e}")))?;
        r.write(&h);
        Ok(r)
    }

    fn write(&mut self, v: &Value) {
        if self.error.is_some() {
            return;
        }
        let r = serde_json::to_writer(&mut self.out, v)
            .map_err(std::io::Error::from)
            .and_then(|()| self.out.write_all(b"\n"));
        if let Err(e) = r {
            self.error = Some(e);
        }
    }

    /// One record as a line of its type.
    fn line(&mut self, ty: &str, record: &impl Serialize) {
        match line_json(ty, record) {
            Ok(v) => self.write(&v),
            Err(e) => self.error = Some(e.into()),
        }
    }

    /// An input that always gets a line (an event, a target added).
    fn input<T: Line>(&mut self, record: &T) {
        self.lazy = None;
        self.line(T::TYPE, record);
    }

    fn event(&mut self, e: &Event) {
        self.events += 1;
        self.input(&EventLine::of(e));
    }

    /// An input written only if a fact follows (ticks, alive checks).
    fn lazy_input(&mut self, ty: &'static str) {
        self.lazy = Some((ty, Beat { t_ns: monotonic_ns() }));
    }

    fn fact(&mut self, f: &Fact) {
        if let Fact::Sample {
            pid,
            vm_pin_kib,
            cpu_seconds,
        } = f
        {
            let now = (*vm_pin_kib, *cpu_seconds);
            if self.last_sample.get(pid) == Some(&now) {
                return;
            }
            self.last_sample.insert(*pid, now);
        }
        if let Some((ty, beat)) = self.lazy.take() {
            self.line(ty, &beat);
        }
        // A fact carries its own `type` (`Fact` is tagged by it).
        match serde_json::to_value(f) {
            Ok(v) => self.write(&v),
            Err(e) => self.error = Some(e.into()),
        }
    }

    /// The kernel aggregates, when they changed since the last line.
    fn aggregates(&mut self, t_ns: u64, rows: &[(AggKey, AggValue)]) {
        let mut now: Vec<(AggKey, u64, u64)> = rows.iter().map(|(k, v)| (*k, v.calls, v.bytes)).collect();
        now.sort_by_key(|x| x.0);
        if now == self.last_aggregates {
            // When they were read still tells the estimator where a short on
            // phase ended: without it, a replay took the read before, and
            // the estimate of a copy loop whose last totals did not change
            // came out 0.4-0.6% off the live trace's (2026-12-06).
            if std::mem::take(&mut self.duty_since_totals) {
                self.input(&Clock { t_ns: Count(t_ns) });
            }
            return;
        }
        self.duty_since_totals = false;
        self.last_aggregates = now;
        self.input(&Aggregates::of(t_ns, rows));
    }

    /// Writes the footer; returns the stream (the workloads' summaries
    /// follow: [`append_workloads`]) and whether every line serialized.
    pub fn finish(mut self, footer: &Footer) -> (StreamFile, Result<()>) {
        self.lazy = None;
        self.line("footer", footer);
        let (out, gz_error) = self.out.finish();
        let r = match self.error.or(gz_error) {
            Some(e) => Err(Error::io(format!("writing the recording {}", out.path.display()), e)),
            None => Ok(()),
        };
        (out, r)
    }
}

/// The recorder observes the aggregator's inputs: each one is a line (ticks
/// and alive checks only when a fact follows them), each fact a line.
impl Observer for Recorder {
    fn input(&mut self, input: &Input) {
        match input {
            Input::Event(e) => self.event(e),
            Input::Target { pid, parent } => self.input(&Target {
                pid: Pid(*pid),
                parent: parent.map(Pid),
            }),
            Input::Tick => self.lazy_input("tick"),
            Input::AliveCheck => self.lazy_input("alive-check"),
            Input::SetupClosed => {
                self.lazy = None;
                self.line("setup-closed", &Beat { t_ns: monotonic_ns() });
            }
            Input::Aggregates { t_ns, rows } => self.aggregates(*t_ns, rows),
            Input::Clock { t_ns } => self.input(&Clock { t_ns: Count(*t_ns) }),
            Input::Duty {
                on_us,
                off_us,
                rest,
                cpu,
            } => {
                self.duty_since_totals = true;
                self.input(&Duty {
                    on_us: Count(*on_us),
                    off_us: Count(*off_us),
                    rest: *rest,
                    cpu: cpu.iter().map(|(p, us)| (Pid(*p), Count(*us))).collect(),
                });
            }
            Input::TrapCost(c) => self.input(&TrapCost {
                entry_ns: c.entry_ns,
                pair_ns: c.pair_ns,
                stepped_ns: Some(c.stepped_ns),
            }),
            Input::Stepped { pid, rows } => self.input(&Stepped {
                pid: Pid(*pid),
                rows: rows.clone(),
            }),
            Input::NcclRas(q) => self.input(q.as_ref()),
            Input::ExactRows { ops } => self.input(&ExactRows { ops: ops.clone() }),
        }
    }

    fn fact(&mut self, fact: &Fact) {
        Recorder::fact(self, fact);
    }
}

/// The `workloads` line as the recording at `path` takes it: a gzip member
/// of its own where the recording is gzip (readers read every member).
fn workloads_line(path: &Path, workloads: &[Value]) -> std::io::Result<Vec<u8>> {
    let v = line_json(
        Workloads::TYPE,
        &Workloads {
            workloads: workloads.to_vec(),
        },
    )?;
    let mut line = serde_json::to_vec(&v)?;
    line.push(b'\n');
    if !gzipped(path) {
        return Ok(line);
    }
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&line)?;
    gz.finish()
}

/// Appends the workloads' own summaries after the footer (they are known
/// only once the command's report is complete) and closes the recording:
/// the error says where it went if the named file failed.
pub fn finish_with_workloads(mut out: StreamFile, workloads: &[Value]) -> Result<()> {
    if !workloads.is_empty()
        && let Ok(line) = workloads_line(&out.path, workloads)
    {
        // A StreamFile takes every byte (or moves to its fallback file).
        let _ = out.write_all(&line);
    }
    out.finish()
}

/// Appends the workloads' own summaries to a finished recording file
/// (validate's workloads).
pub fn append_workloads(path: &Path, workloads: &[Value]) -> Result<()> {
    if workloads.is_empty() {
        return Ok(());
    }
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| Error::io(format!("appending to the recording {}", path.display()), e))?;
    let line = workloads_line(path, workloads).map_err(|e| Error::Workload(format!("the workloads line: {e}")))?;
    f.write_all(&line)
        .map_err(|e| Error::io(format!("appending to the recording {}", path.display()), e))
}
