//! The recorder: an observer of the aggregator's inputs, one line each.
use super::{codec::Beat, *};

/// Writes a recording while tracing. Write errors are kept and reported
/// once, when the recording is finished.
#[derive(Debug)]
pub struct Recorder {
    /// A stream: a write error moves the recording to a fallback file
    /// (`output::StreamFile`); `error` holds serialization errors.
    out: BufWriter<StreamFile>,
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
            out: BufWriter::with_capacity(1 << 16, out),
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
        // A StreamFile takes every byte: the flush cannot fail.
        let out = match self.out.into_inner() {
            Ok(s) => s,
            Err(e) => e.into_inner().into_parts().0,
        };
        let r = match self.error {
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
        }
    }

    fn fact(&mut self, fact: &Fact) {
        Recorder::fact(self, fact);
    }
}

fn workloads_line(workloads: &[Value]) -> serde_json::Result<Value> {
    line_json(
        Workloads::TYPE,
        &Workloads {
            workloads: workloads.to_vec(),
        },
    )
}

/// Appends the workloads' own summaries after the footer (they are known
/// only once the command's report is complete) and closes the recording:
/// the error says where it went if the named file failed.
pub fn finish_with_workloads(mut out: StreamFile, workloads: &[Value]) -> Result<()> {
    if !workloads.is_empty()
        && let Ok(line) = workloads_line(workloads)
    {
        // A StreamFile takes every byte (or moves to its fallback file).
        let _ = writeln!(out, "{line}");
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
    let line = workloads_line(workloads).map_err(|e| Error::Workload(format!("the workloads line: {e}")))?;
    writeln!(f, "{line}").map_err(|e| Error::io(format!("appending to the recording {}", path.display()), e))
}
