//! `gdrtrace run -- CMD...`: trace a command and its children.
use std::{cell::Cell, path::Path, rc::Rc};

use crate::{
    cli::{Format, RunArgs, TraceArgs},
    error::{Error, Result},
    loader::{self, LoadOptions},
    report::{Report, text},
    session::{Session, SessionOptions},
    spawn,
    trace::Trace,
};

pub fn run(args: &RunArgs) -> Result<i32> {
    if args.command.is_empty() {
        return Err(Error::Usage(
            "run needs a command after '--' (e.g. gdrtrace run -- ib_write_bw -d rxe0)".into(),
        ));
    }
    let mut out = trace_command(&args.trace, &args.command)?;
    emit(&args.trace, &out.report)?;
    super::report_close(&mut out.session);
    Ok(out.exit_code)
}

/// What tracing a command produced.
pub struct Outcome {
    pub report: Report,
    pub pid: u32,
    /// The command's exit status (128+signal), or 0 if tracing stopped first.
    pub exit_code: i32,
    /// The session, window closed: its links are closed after the report
    /// is out (or when this is dropped).
    pub session: Session,
}

/// Fails early, before any BPF work, when the command cannot be found.
fn check_command(argv0: &str) -> Result<()> {
    let found = if argv0.contains('/') {
        Path::new(argv0).is_file()
    } else {
        std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(argv0).is_file()))
    };
    if found {
        Ok(())
    } else {
        Err(Error::Usage(format!("cannot run '{argv0}': command not found")))
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
    })
}

/// Starts `argv` held, adds it to the target set, releases it, and traces
/// until it exits (or `--duration`, SIGINT, SIGTERM).
pub fn trace_command(t: &TraceArgs, argv: &[String]) -> Result<Outcome> {
    check_command(&argv[0])?;
    let opts = session_options(t)?;
    let session = Session::open(&opts)?;
    let mut trace = Trace::new(session);
    trace.outputs(t)?;
    let rt = super::runtime()?;
    let code = Rc::new(Cell::new(None::<i32>));
    let pid = rt.block_on(async {
        // Handlers first: a signal while the command starts must end the trace cleanly.
        let signals = super::stop_signal(t.duration)?;
        let gated = spawn::spawn_gated(argv)?;
        let gpid = gated.pid;
        if let Err(e) = trace.add_target(gpid, None) {
            // SAFETY: our own held child; it has not run anything yet.
            unsafe { libc::kill(gpid as i32, libc::SIGKILL) };
            spawn::wait(gpid);
            return Err(e);
        }
        let pid = gated.release()?;
        let mut waiter = tokio::task::spawn_blocking(move || spawn::wait(pid));
        let code2 = code.clone();
        let stop = async move {
            tokio::select! {
                r = &mut waiter => code2.set(Some(r.unwrap_or(1))),
                () = signals => {}
            }
        };
        trace.run_until(stop).await?;
        Ok::<u32, Error>(pid)
    })?;
    let report = trace.report(argv.to_vec())?;
    Ok(Outcome {
        report,
        pid,
        exit_code: code.get().unwrap_or(0),
        session: trace.session,
    })
}

/// Prints the report (text or JSON) and writes `--json FILE`; appends the
/// workloads' summaries to `--record FILE`.
pub fn emit(t: &TraceArgs, report: &Report) -> Result<()> {
    if let Some(path) = &t.record {
        crate::events::recording::append_workloads(path, &report.workloads)?;
    }
    let nvlink = crate::topo::discover().nvlink();
    emit_with(
        t.json.as_deref(),
        t.format,
        t.nccl_log.as_deref(),
        t.ucx_log.as_deref(),
        nvlink,
        report,
    )
}

/// Judges the report (unless judged already) with the given NVLink fact,
/// prints it and writes `json`.
pub fn emit_with(
    json_path: Option<&Path>,
    format: Format,
    nccl_log: Option<&Path>,
    ucx_log: Option<&Path>,
    nvlink: Option<bool>,
    report: &Report,
) -> Result<()> {
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| Error::io(format!("reading {}", p.display()), e));
    let mut judged;
    let report = if !report.judged || ucx_log.is_some() {
        judged = report.clone();
        if !judged.judged {
            let log = nccl_log.map(read).transpose()?;
            judged.judge_with(log.as_deref(), nvlink);
        }
        if let Some(p) = ucx_log {
            judged.corroborate_ucx(&read(p)?);
        }
        &judged
    } else {
        report
    };
    let json =
        serde_json::to_string_pretty(report).map_err(|e| Error::Workload(format!("serializing the report: {e}")))?;
    if let Some(path) = json_path {
        std::fs::write(path, &json).map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    }
    match format {
        Format::Json => println!("{json}"),
        Format::Text => {
            print!("{}", text::render(report));
            if let Ok(v) = serde_json::to_value(report) {
                print!("\n{}", crate::classify::explain::render(&v, &report.explain));
            }
        }
    }
    Ok(())
}
