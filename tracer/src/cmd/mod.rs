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
pub mod serve;
pub mod topo;
pub mod validate;

use crate::{cli::Command, error::Result};

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
        Command::Compare(a) => Ok(compare::compare(&a)),
        Command::Bench(b) => bench::bench(&b),
        Command::Serve(a) => serve::serve(&a),
    }
}

/// Closes the uprobe links after the report is out and says how long it
/// took: with `uprobe_multi` links milliseconds, with per-point links the
/// kernel unregisters each behind a grace period.
pub fn report_close(session: &mut crate::session::Session) {
    let c = session.close_uprobes();
    if c.links > 0 {
        eprintln!(
            "gdrtrace: closed {} uprobe link(s) holding {} probe point(s) in {:.0} ms",
            c.links, c.points, c.ms
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

/// Completes on `--duration`, Ctrl-C (SIGINT) or SIGTERM, whichever first.
/// Both handlers are installed when this is called (it must be inside the
/// runtime), not when the future is first polled, so a signal that arrives
/// right after the caller announces readiness is not fatal.
pub fn stop_signal(
    duration: Option<std::time::Duration>,
) -> crate::error::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let install = |kind, name: &str| {
        signal(kind).map_err(|e| crate::error::Error::io(format!("installing the {name} handler"), e))
    };
    let mut sigterm = install(SignalKind::terminate(), "SIGTERM")?;
    let mut sigint = install(SignalKind::interrupt(), "SIGINT")?;
    Ok(async move {
        let sleep = async {
            match duration {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = sleep => {}
            _ = sigint.recv() => {}
            _ = sigterm.recv() => {}
        }
    })
}
