//! One module per subcommand.
pub mod attach;
pub mod baseline;
pub mod bench;
pub mod compare;
pub mod completions;
pub mod doctor;
pub mod drive;
pub mod explain;
pub mod job;
pub mod replay;
pub mod run;
pub mod serve;
pub mod top;
pub mod topo;
pub mod validate;

// Moved below `cmd` so that `serve` can use them without importing `cmd`.
use crate::{
    cli::{BaselineCmd, Command},
    error::{Error, Result, describe},
};
pub use crate::{
    session::report_close,
    signals::{runtime, stop_signal},
};

/// Runs a subcommand; returns the process exit status.
pub fn dispatch(cmd: Command) -> Result<i32> {
    match cmd {
        Command::Attach(a) => attach::attach(&a),
        Command::Top(a) => top::top(&a),
        Command::Doctor(a) => doctor::doctor(&a),
        Command::Topo(a) => topo::topo(&a),
        Command::Explain(a) => explain::explain(&a),
        Command::Run(a) => run::run(&a),
        Command::Validate(a) => validate::validate(&a),
        Command::Replay(a) => replay::replay(&a),
        Command::Job(a) => job::job(&a),
        Command::Drive(d) => drive::drive(&d),
        Command::Baseline(BaselineCmd::Record(a)) => baseline::record(&a),
        Command::Compare(a) => compare::compare(&a),
        Command::Bench(b) => bench::bench(&b),
        Command::Serve(a) => serve::serve(&a),
        Command::Completions(a) => completions::completions(&a),
        Command::Man(a) => completions::man(&a),
    }
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
