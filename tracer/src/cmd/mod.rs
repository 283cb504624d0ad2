//! One module per subcommand.
pub mod attach;
pub mod baseline;
pub mod bench;
pub mod compare;
pub mod doctor;
pub mod drive;
pub mod explain;
pub mod replay;
pub mod run;
pub mod topo;
pub mod validate;

use crate::{
    cli::Command,
    error::{Error, Result, describe},
};

/// Runs a subcommand; returns the process exit status.
pub fn dispatch(cmd: Command) -> Result<i32> {
    match cmd {
        Command::Attach(a) => attach::attach(&a),
        Command::Doctor(a) => doctor::doctor(&a),
        Command::Topo(a) => topo::topo(&a),
        Command::Explain(a) => explain::explain(&a),
        Command::Run(a) => run::run(&a),
        Command::Validate(a) => validate::validate(&a),
        Command::Replay(a) => replay::replay(&a),
        Command::Drive(d) => drive::drive(&d),
        Command::Baseline(crate::cli::BaselineCmd::Record(a)) => baseline::record(&a),
        Command::Compare(a) => compare::compare(&a),
        Command::Bench(b) => bench::bench(&b),
    }
}

/// Closes the uprobe links after the report is out and says how long it
/// took: with `uprobe_multi` links milliseconds, with per-point links the
/// kernel unregisters each behind a grace period.
pub fn report_close(session: &mut crate::session::Session) {
    let c = session.close_uprobes();
    if c.links > 0 {
        errln!(
            "gdrtrace: closed {} uprobe link(s) holding {} probe point(s) in {:.0} ms",
            c.links,
            c.points,
            c.ms
        );
    }
}

/// A single-threaded tokio runtime: the tracer forks traced commands, and
/// one thread keeps that safe and the overhead small.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| crate::error::Error::io("starting the tokio runtime", e))
}

/// Completes on `--duration`, Ctrl-C (SIGINT) or SIGTERM, whichever first
/// (`attach`'s stop). The handlers are installed when this is called, not
/// when the future is first polled, so a signal that arrives right after
/// the caller announces readiness is not lost.
pub fn stop_signal(
    duration: Option<std::time::Duration>,
) -> crate::error::Result<impl std::future::Future<Output = ()>> {
    let signals = crate::signals::Signals::install()
        .map_err(|e| crate::error::Error::io("installing the SIGINT and SIGTERM handlers", e))?;
    Ok(async move {
        let sleep = async {
            match duration {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = sleep => {}
            _ = signals.recv() => {}
        }
    })
}

/// Prints every error but the first, and returns the first (or Ok).
pub fn first_error(mut errors: Vec<Error>) -> Result<()> {
    if errors.is_empty() {
        return Ok(());
    }
    let first = errors.remove(0);
    for e in errors {
        errln!("gdrtrace: {}", describe(&e));
    }
    Err(first)
}

/// The exit status of a command whose result says `code` but that hit
/// `errors` on the way (printed here): never 0 when there were any.
pub fn finish(code: i32, errors: Vec<Error>) -> Result<i32> {
    for e in &errors {
        errln!("gdrtrace: {}", describe(e));
    }
    Ok(match errors.first() {
        Some(e) if code == 0 => e.exit_code(),
        _ => code,
    })
}
