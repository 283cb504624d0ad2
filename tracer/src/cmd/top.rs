//! `gdrtrace top`: the live view. Tracing is `attach`'s (the same targets,
//! session, loop and report: `attach::open`, `Trace::run_until`); each
//! `--interval` the loop hands the judged report so far to the view
//! (`Interval::snapshots`), which runs on a thread of its own (`top::show`).
//! `--replay` plays a recording's inputs into a fresh aggregator at the
//! recording's pace (`replay::Feeder`) and shows the same frames.
use std::{
    cell::{Cell, RefCell},
    path::Path,
    rc::Rc,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use crate::{
    cli::{Format, TopArgs, TraceArgs},
    error::{Error, Result},
    output::{self, Named, OutputFile},
    stats::feed::Input,
    top::{self, Msg, app::App, feed::Feed, term},
    trace::Interval,
};

/// What `top` says, and exits 2 with, without a terminal.
pub const NO_TTY: &str = "top needs a terminal (standard input and output are not both a TTY); for per-process lines in a pipe or a log, use `gdrtrace attach --interval 1s` with the same target flags";

pub fn top(args: &TopArgs) -> Result<i32> {
    if !term::interactive() {
        return Err(Error::Usage(NO_TTY.into()));
    }
    match &args.replay {
        Some(path) => replay(args, path),
        None => live(args),
    }
}

/// The trace flags `top` shares with `attach`.
fn trace_args(args: &TopArgs) -> TraceArgs {
    TraceArgs {
        duration: args.duration,
        json: args.json.clone(),
        format: Format::Text,
        ringbuf_bytes: tracer_common::RINGBUF_BYTES as u64,
        nccl_log: args.nccl_log.clone(),
        ucx_log: None,
        record: args.record.clone(),
        transfers: None,
        trace_event: args.trace_event.clone(),
        no_installed_libraries: false,
        collectives: args.collectives,
        input: args.input.clone(),
        nccl_ras: None,
    }
}

/// Starts the view on its own thread.
fn spawn_view(
    app: App,
    rx: mpsc::Receiver<Msg>,
    on_quit: impl Fn() + Send + 'static,
) -> Result<std::thread::JoinHandle<std::io::Result<()>>> {
    std::thread::Builder::new()
        .name("top-view".into())
        .spawn(move || top::show(app, rx, on_quit))
        .map_err(|e| Error::io("starting the view's thread", e))
}

/// Waits for the view to end; its error (a terminal that failed) is one line.
fn join_view(ui: std::thread::JoinHandle<std::io::Result<()>>) -> Option<Error> {
    match ui.join() {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(Error::io("the terminal", e)),
        // The panic hook printed it (after restoring the terminal).
        Err(_) => Some(Error::Workload("the view stopped on an internal error".into())),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    TargetsExited,
    Stopped,
    Quit,
}

fn live(args: &TopArgs) -> Result<i32> {
    let t = trace_args(args);
    // Said before anything is loaded, on the terminal the view then takes
    // (seen again once it ends).
    let interval = super::attach::interval_of(args.interval);
    let mut a = super::attach::open("top", &args.targets, &t, &[])?;
    let mut what: Vec<String> = Vec::new();
    if !args.targets.pid.is_empty() {
        let pids: Vec<String> = args.targets.pid.iter().map(u32::to_string).collect();
        what.push(format!("pid {}", pids.join(",")));
    }
    if let Some(c) = &args.targets.comm {
        what.push(format!("comm {c}"));
    }
    if let Some(c) = &args.targets.cgroup {
        what.push(format!("cgroup {}", c.display()));
    }
    if args.targets.all {
        what.push("all processes".into());
    }
    let source = format!("attach {} ({} traced at start)", what.join(" "), a.live.len());
    let (tx, rx) = mpsc::channel();
    let quit = Arc::new(tokio::sync::Notify::new());
    let ui = {
        let quit = quit.clone();
        spawn_view(App::new(source, crate::units::fmt_duration(interval)), rx, move || {
            quit.notify_one()
        })?
    };
    let feed = Rc::new(RefCell::new(Feed::default()));
    let mut every = Interval::new(interval, Box::new(|_| {}));
    {
        let feed = feed.clone();
        let tx = tx.clone();
        every.snapshots = Some(Box::new(move |r| {
            let f = feed.borrow_mut().frame(&r);
            let _ = tx.send(Msg::Frame(f));
        }));
    }
    a.trace.interval = Some(every);
    let end = Cell::new(End::TargetsExited);
    let signals = std::mem::replace(&mut a.signals, Box::pin(std::future::pending()));
    let stop = async {
        tokio::select! {
            () = signals => end.set(End::Stopped),
            () = quit.notified() => end.set(End::Quit),
        }
    };
    let traced = {
        let super::attach::Attached { rt, trace, .. } = &mut a;
        rt.block_on(async { trace.run_until(stop).await })
    };
    a.trace.interval = None;
    let report = traced.and_then(|()| a.report(&t));
    let mut errors = Vec::new();
    let last = match &report {
        Ok(r) => {
            errors.extend(a.write(&t, r, None));
            Some(feed.borrow_mut().summary(r))
        }
        Err(_) => None,
    };
    let (why, quit_now) = match end.get() {
        End::Quit => (String::new(), true),
        End::Stopped => ("tracing stopped (SIGINT, SIGTERM or --duration)".into(), true),
        End::TargetsExited => (
            "every target exited: tracing ended (rates are averages over the trace)".into(),
            false,
        ),
    };
    let _ = tx.send(Msg::Ended {
        why,
        last,
        quit: quit_now || report.is_err(),
    });
    drop(tx);
    let view_error = join_view(ui);
    super::report_close(&mut a.trace.session);
    let report = report?;
    errors.extend(view_error);
    errln!(
        "gdrtrace top: traced {} process(es) for {:.1} s{}",
        report.processes.len(),
        report.duration_s,
        args.json
            .as_ref()
            .map_or(String::new(), |p| format!("; the report is in {}", p.display()))
    );
    super::finish(0, errors)
}

/// The recording time an input carries (`CLOCK_MONOTONIC` ns), if any.
fn time_of(input: &Input) -> Option<u64> {
    match input {
        Input::Event(e) if e.start_ns > 0 => Some(e.start_ns.saturating_add(e.dur_ns)),
        Input::Aggregates { t_ns, .. } if *t_ns > 0 => Some(*t_ns),
        _ => None,
    }
}

/// Sleeps until `at`, in short steps; false when the user quit meanwhile.
fn wait_until(at: Instant, quit: &AtomicBool) -> bool {
    loop {
        if quit.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= at {
            return true;
        }
        std::thread::sleep((at - now).min(Duration::from_millis(50)));
    }
}

fn replay(args: &TopArgs, path: &Path) -> Result<i32> {
    output::check_distinct(&[
        Named::input("--replay", Some(path)),
        Named::input("--nccl-log", args.nccl_log.as_deref()),
        Named::output("--json", args.json.as_deref()),
        Named::output("--trace-event", args.trace_event.as_deref()),
    ])?;
    let log = args.nccl_log.as_deref().map(crate::input::read_to_string).transpose()?;
    let json = OutputFile::open_opt("--json", args.json.as_deref())?;
    let trace_event = OutputFile::open_opt("--trace-event", args.trace_event.as_deref())?;
    let rec = super::replay::load(path)?;
    let damaged = super::replay::damaged(&path.display().to_string(), &rec, args.damage);
    let speed = if args.speed == 1.0 {
        String::new()
    } else {
        format!(" x{}", args.speed)
    };
    let source = format!("replay {}{speed}", path.display());
    let (tx, rx) = mpsc::channel();
    let quit = Arc::new(AtomicBool::new(false));
    let ui = {
        let quit = quit.clone();
        spawn_view(
            App::new(source, crate::units::fmt_duration(args.interval)),
            rx,
            move || quit.store(true, Ordering::Relaxed),
        )?
    };
    let mut feeder = super::replay::Feeder::new(&rec, None, trace_event.is_some());
    let mut feed = Feed::default();
    let started = Instant::now();
    let every_ns = (args.interval.as_nanos() as u64).max(1);
    let mut next_at = every_ns;
    let mut now_ns = 0u64;
    let mut playing = true;
    for input in &rec.inputs {
        if let Some(t) = time_of(&input.0) {
            now_ns = now_ns.max(t.saturating_sub(rec.header.started_ns));
        }
        // Every interval boundary the recording passes is a frame, shown
        // when the wall clock (at --speed) gets there.
        while playing && now_ns >= next_at {
            let at = started + Duration::from_secs_f64(next_at as f64 / 1e9 / args.speed);
            playing = wait_until(at, &quit);
            if playing {
                let r = feeder.snapshot(&rec, next_at as f64 / 1e9, log.as_deref());
                playing = tx.send(Msg::Frame(feed.frame(&r))).is_ok();
            }
            next_at += every_ns;
        }
        // After a quit the rest is fed at once: the files are of the whole recording.
        feeder.feed(input);
    }
    let mut agg = feeder.finish(&rec);
    let report = super::replay::judged(&rec, &mut agg, log.as_deref());
    let last = Some(feed.summary(&report));
    let _ = tx.send(Msg::Ended {
        why: "replay finished (rates are averages over the recording)".into(),
        last,
        quit: false,
    });
    drop(tx);
    let view_error = join_view(ui);
    let mut errors = Vec::new();
    let timeline = agg
        .take_timeline()
        .map(|t| crate::report::timeline::render(&t, &report));
    if let Err(e) = super::run::write_timeline(trace_event, timeline) {
        errors.push(e);
    }
    if let Err(e) = super::run::emit_with(json, None, None, &report) {
        errors.push(e);
    }
    errors.extend(view_error);
    errors.extend(damaged);
    super::finish(0, errors)
}
