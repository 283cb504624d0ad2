//! `gdrtrace run -- CMD...`: trace a command and its children.
//!
//! What ends a run, and its exit status (also in `--help` and the README):
//! - the command exits: report, then exit with its status;
//! - SIGINT or SIGTERM: passed on to the command (unless the terminal sent
//!   it to the whole process group, the command included), tracing goes on
//!   until the command exits, then report and its status;
//! - a second SIGINT or SIGTERM: report what was traced and exit at once
//!   with 128+signal, leaving the command running;
//! - `--duration`: report at the deadline; the command and every process
//!   traced with it get SIGTERM there (as with `perf stat --timeout` and
//!   timeout(1): nothing is left running untraced), SIGKILL [`KILL_AFTER`]
//!   later if still running, and the command's status is the exit status.
use std::{cell::Cell, time::Duration};

use crate::{
    cli::{Format, RunArgs, TraceArgs},
    error::{Error, Result},
    input,
    loader::{self, LoadOptions},
    output::{self, Named, OutputFile},
    probes::Status,
    report::{Report, text},
    session::{Session, SessionOptions},
    signals::{Received, Signals},
    spawn::{self, Child, Waited},
    trace::Trace,
};

/// How long a command has between the SIGTERM of `--duration` and SIGKILL.
pub const KILL_AFTER: Duration = Duration::from_secs(10);

pub fn run(args: &RunArgs) -> Result<i32> {
    if args.command.is_empty() {
        return Err(Error::Usage(
            "run needs a command after '--' (e.g. gdrtrace run -- ib_write_bw -d rxe0)".into(),
        ));
    }
    // Everything that can be refused is, before any BPF is loaded or the
    // command started: the command, then the files.
    spawn::resolve(&args.command[0])?;
    let mut files = Outputs::open(&args.trace, &[])?;
    let mut out = trace_command(&args.trace, &args.command, Announce::Banner)?;
    let mut errors = std::mem::take(&mut out.errors);
    files.recording = out.recording.take();
    if let Err(e) = emit(&args.trace, files, &out.report, out.timeline.take()) {
        errors.push(e);
    }
    super::report_close(&mut out.session);
    let code = out.end.finish();
    super::finish(code, errors)
}

/// The files named by a command's trace flags, checked or opened up front.
pub struct Outputs {
    pub json: Option<OutputFile>,
    /// The `--record` stream once the trace is done (its footer written):
    /// `emit` appends the workloads' summaries and closes it.
    pub recording: Option<output::StreamFile>,
    pub trace_event: Option<OutputFile>,
}

impl Outputs {
    /// No `--json` (validate's secondary workloads).
    pub fn none() -> Self {
        Outputs {
            json: None,
            recording: None,
            trace_event: None,
        }
    }

    /// Checks that no output names an input or another output (`extra`:
    /// the command's other paths, such as attach's `--jsonl`), checks
    /// `--nccl-log` (read at the end), `--record` and `--transfers`
    /// (created when tracing starts), and opens `--json`.
    pub fn open(t: &TraceArgs, extra: &[Option<Named<'_>>]) -> Result<Self> {
        let mut paths = vec![
            Named::input("--nccl-log", t.nccl_log.as_deref()),
            Named::input("--ucx-log", t.ucx_log.as_deref()),
            Named::output("--json", t.json.as_deref()),
            Named::output("--record", t.record.as_deref()),
            Named::output("--transfers", t.transfers.as_deref()),
            Named::output("--trace-event", t.trace_event.as_deref()),
        ];
        paths.extend_from_slice(extra);
        output::check_distinct(&paths)?;
        if let Some(p) = &t.nccl_log {
            input::Input::open(p)?;
        }
        output::check_writable("--record", t.record.as_deref())?;
        output::check_writable("--transfers", t.transfers.as_deref())?;
        Ok(Outputs {
            json: OutputFile::open_opt("--json", t.json.as_deref())?,
            recording: None,
            trace_event: OutputFile::open_opt("--trace-event", t.trace_event.as_deref())?,
        })
    }
}

/// How tracing the command ended.
#[derive(Debug)]
pub enum End {
    /// The command exited with this shell-style status.
    Exited(i32),
    /// `--duration` passed: the command and its traced descendants got
    /// SIGTERM; the command is still to be waited for, the descendants
    /// watched until [`KILL_AFTER`].
    Deadline(Child, Vec<spawn::Watched>),
    /// A second signal ended the trace; the command still runs.
    Abandoned(Received),
}

impl End {
    /// The exit status: the command's (waiting for it after `--duration`,
    /// SIGKILL after [`KILL_AFTER`]), or 128+signal when a signal cut it short.
    pub fn finish(self) -> i32 {
        match self {
            End::Exited(code) => code,
            End::Abandoned(s) => s.exit_code(),
            End::Deadline(mut child, descendants) => {
                output::flush_stdout();
                let kill_at = std::time::Instant::now() + KILL_AFTER;
                let Ok(signals) = Signals::install() else {
                    return spawn::wait(child.pid);
                };
                let code = match child.wait_or_signal(&signals, KILL_AFTER) {
                    Waited::Exited(code) => code,
                    // A signal now: exit at once, as a second signal does.
                    Waited::Signal(s) => return s.exit_code(),
                    Waited::TimedOut => {
                        errln!(
                            "gdrtrace: the command (pid {}) was still running {} s after SIGTERM: sent SIGKILL",
                            child.pid,
                            KILL_AFTER.as_secs()
                        );
                        child.signal(libc::SIGKILL);
                        match child.wait_or_signal(&signals, Duration::from_secs(3600)) {
                            Waited::Exited(code) => code,
                            Waited::Signal(s) => s.exit_code(),
                            Waited::TimedOut => 128 + libc::SIGKILL,
                        }
                    }
                };
                // The command is gone; a process traced with it that
                // ignores SIGTERM (`(trap "" TERM; exec sleep 99) &`) still
                // gets SIGKILL when the window ends: gdrtrace stays until
                // then, watching it through its pidfd (never a reused pid).
                let left = spawn::watch_until(&descendants, kill_at, &signals);
                if left > 0 {
                    errln!(
                        "gdrtrace: {left} process(es) traced with the command still running {} s after SIGTERM: sent SIGKILL",
                        KILL_AFTER.as_secs()
                    );
                }
                code
            }
        }
    }
}

/// What tracing a command produced.
pub struct Outcome {
    pub report: Report,
    pub pid: u32,
    pub end: End,
    /// Files that failed at the end (the report is complete regardless).
    pub errors: Vec<Error>,
    /// The session, window closed: its links are closed after the report
    /// is out (or when this is dropped).
    pub session: Session,
    /// The `--record` stream, footer written (see [`Outputs::recording`]).
    pub recording: Option<output::StreamFile>,
    /// The timeline (`--trace-event`), rendered.
    pub timeline: Option<String>,
}

impl Outcome {
    /// The report, the command's exit status (see [`End::finish`]) and the
    /// files that failed (the recording is closed here, without workloads).
    pub fn finish(mut self) -> (Report, i32, Vec<Error>) {
        if let Some(r) = self.recording.take()
            && let Err(e) = r.finish()
        {
            self.errors.push(e);
        }
        let code = self.end.finish();
        (self.report, code, self.errors)
    }

    /// As `finish`, writing the timeline to `t.trace_event` (validate's
    /// later workloads, whose files are named after the first one's).
    pub fn finish_writing(mut self, t: &TraceArgs) -> (Report, i32, Vec<Error>) {
        let timeline = self.timeline.take();
        let file = OutputFile::open_opt("--trace-event", t.trace_event.as_deref());
        let (report, code, mut errors) = self.finish();
        if let Err(e) = file.and_then(|f| write_timeline(f, timeline)) {
            errors.push(e);
        }
        (report, code, errors)
    }
}

pub fn session_options(t: &TraceArgs) -> Result<SessionOptions> {
    Ok(SessionOptions {
        load: LoadOptions {
            ringbuf_bytes: loader::check_ringbuf_size(t.ringbuf_bytes)?,
            targets_only: true,
            ..LoadOptions::default()
        },
        families: None,
        installed_libraries: !t.no_installed_libraries,
        collectives: t.collectives.unwrap_or_default(),
    })
}

/// Why the stop future completed.
#[derive(Clone, Copy, Debug)]
enum Stop {
    Exited(i32),
    Deadline,
    Abandoned(Received),
}

/// Whether `trace_command` says on stderr what it traces before the command
/// runs (`run`; validate prints its own progress lines).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Announce {
    Banner,
    Quiet,
}

/// The line `run` prints once its probes are in, before the command runs,
/// as perf and bpftrace say `Attaching N probes...`.
fn banner(session: &Session, argv0: &std::ffi::OsStr, pid: u32) -> String {
    let rows = &session.planner.coverage;
    let attached = rows.iter().filter(|c| c.status == Status::Attached).count();
    format!(
        "gdrtrace: tracing {} (pid {pid}) and its children: {attached} of {} probe points and {} uprobes in {} library file(s) attached; Ctrl-C passes on to the command, twice reports at once",
        argv0.to_string_lossy(),
        rows.len(),
        session.planner.uprobes.points(),
        session.planner.libs.len(),
    )
}

/// Starts `argv` held, adds it to the target set, releases it, and traces
/// until it exits, `--duration` passes, or a second signal (see the module
/// documentation).
pub fn trace_command<S: AsRef<std::ffi::OsStr>>(t: &TraceArgs, argv: &[S], announce: Announce) -> Result<Outcome> {
    spawn::resolve(&argv[0])?;
    // Handlers first: a signal while the programs load must not be lost.
    let signals = Signals::install().map_err(|e| Error::io("installing the SIGINT and SIGTERM handlers", e))?;
    let opts = session_options(t)?;
    let session = Session::open(&opts)?;
    let mut trace = Trace::new(session);
    trace.outputs(t.record.as_deref(), t.transfers.as_deref(), t.trace_event.is_some())?;
    trace.nccl_ras = t.nccl_ras.as_deref().map(|a| crate::identity::ras::Asker::new(a, None));
    let rt = super::runtime()?;
    let stopped = Cell::new(None::<Stop>);
    let (pid, child) = rt.block_on(async {
        if let Some(s) = signals.try_recv() {
            return Err(Error::Interrupted {
                name: s.name(),
                signo: s.signo,
            });
        }
        let gated = spawn::spawn_gated(argv)?;
        let gpid = gated.pid;
        if let Err(e) = trace.add_target(gpid, None) {
            // SAFETY: our own held child; it has not run anything yet.
            unsafe { libc::kill(gpid as i32, libc::SIGKILL) };
            spawn::wait(gpid);
            return Err(e);
        }
        if announce == Announce::Banner {
            errln!("{}", banner(&trace.session, argv[0].as_ref(), gpid));
        }
        let mut child = gated.release()?;
        let pid = child.pid;
        let stop = async {
            let deadline = async {
                match t.duration {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(deadline);
            let mut first = None;
            loop {
                tokio::select! {
                    code = child.exited() => return stopped.set(Some(Stop::Exited(code))),
                    () = &mut deadline => {
                        // SAFETY: our child; not reaped yet (its exit is
                        // reaped only by `exited`), so the pid is still its.
                        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
                        return stopped.set(Some(Stop::Deadline));
                    }
                    r = signals.recv() => {
                        let Ok(s) = r else { return std::future::pending().await };
                        if first.is_some() {
                            return stopped.set(Some(Stop::Abandoned(s)));
                        }
                        first = Some(s);
                        if !s.from_terminal {
                            // SAFETY: as above.
                            unsafe { libc::kill(pid as i32, s.signo) };
                        }
                        errln!(
                            "gdrtrace: {}{}: reporting when the command (pid {pid}) exits; a second signal reports and exits at once",
                            s.name(),
                            if s.from_terminal { "" } else { " passed on to the command" }
                        );
                    }
                }
            }
        };
        trace.run_until(stop).await?;
        Ok::<_, Error>((pid, child))
    })?;
    let log = nccl_log(t).map_err(|e| trace.late_errors.push(e)).ok().flatten();
    // The report's command is text: an argument that is not UTF-8 shows
    // its bad bytes as U+FFFD (the command itself got them as they are).
    let command = argv.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect();
    let report = trace.report(command, log.as_deref())?;
    let end = match stopped.get() {
        Some(Stop::Exited(code)) => End::Exited(code),
        Some(Stop::Abandoned(s)) => End::Abandoned(s),
        Some(Stop::Deadline) => {
            // Pidfds first: the signals and the later SIGKILL reach these
            // processes, never a process that reused a pid.
            let descendants: Vec<spawn::Watched> = trace
                .agg
                .live_pids()
                .into_iter()
                .filter(|p| *p != pid && crate::counters::running(*p))
                .filter_map(spawn::Watched::open)
                .collect();
            for d in &descendants {
                d.signal(libc::SIGTERM);
            }
            End::Deadline(child, descendants)
        }
        None => End::Exited(spawn::wait(child.pid)),
    };
    Ok(Outcome {
        report,
        pid,
        end,
        errors: std::mem::take(&mut trace.late_errors),
        recording: trace.recording.take(),
        timeline: trace.timeline.take(),
        session: trace.session,
    })
}

/// Prints the report (text or JSON) and writes `--json` and
/// `--trace-event`; appends the workloads' summaries to `--record FILE`.
/// Every step is tried; the first failure is returned, the others printed.
pub fn emit(t: &TraceArgs, files: Outputs, report: &Report, timeline: Option<String>) -> Result<()> {
    write_outputs(t, files, report, timeline, Some(t.format))
}

/// As `emit`, printing the report on stdout only when `print` says how
/// (`top` prints none: its view was the output).
pub fn write_outputs(
    t: &TraceArgs,
    files: Outputs,
    report: &Report,
    timeline: Option<String>,
    print: Option<Format>,
) -> Result<()> {
    let mut errors = Vec::new();
    if let Err(e) = write_timeline(files.trace_event, timeline) {
        errors.push(e);
    }
    if let Some(out) = files.recording
        && let Err(e) = crate::recording::finish_with_workloads(out, &report.workloads)
    {
        errors.push(e);
    }
    let ucx = match &t.ucx_log {
        Some(p) => input::read_to_string(p).map_err(|e| errors.push(e)).ok(),
        None => None,
    };
    if let Err(e) = emit_with(files.json, print, ucx.as_deref(), report) {
        errors.push(e);
    }
    super::first_error(errors)
}

/// Writes the rendered timeline to `--trace-event` (an empty one when the
/// trace collected none, e.g. a workload that failed to start).
pub fn write_timeline(file: Option<OutputFile>, timeline: Option<String>) -> Result<()> {
    match file {
        Some(f) => f.write(timeline.unwrap_or_default().as_bytes()),
        None => Ok(()),
    }
}

/// The `--nccl-log` text, read when the traced job is done (None: not given).
pub fn nccl_log(t: &TraceArgs) -> Result<Option<String>> {
    t.nccl_log.as_deref().map(input::read_to_string).transpose()
}

/// Prints the (judged) report, compared with a UCX log if given, then
/// writes `json` (even when standard output is closed).
pub fn emit_with(
    json: Option<OutputFile>,
    format: Option<Format>,
    ucx_log: Option<&str>,
    report: &Report,
) -> Result<()> {
    debug_assert!(report.judged, "reports are judged once, where they are built");
    let mut corroborated;
    let report = match ucx_log {
        Some(l) => {
            corroborated = report.clone();
            corroborated.corroborate_ucx(l);
            crate::explain::fill(&mut corroborated);
            &corroborated
        }
        None => report,
    };
    let text_json =
        serde_json::to_string_pretty(report).map_err(|e| Error::Workload(format!("serializing the report: {e}")))?;
    match format {
        Some(Format::Json) => {
            outln!("{text_json}");
        }
        Some(Format::Text) => {
            out!("{}", text::render(report));
        }
        None => {}
    }
    match json {
        Some(f) => f.write(text_json.as_bytes()),
        None => Ok(()),
    }
}
