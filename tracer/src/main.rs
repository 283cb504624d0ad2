//! `gdrtrace`: parse, dispatch, and turn every failure into one line.
use clap::Parser as _;
use gdrtrace::{
    cli::{self, Cli},
    cmd, errln,
    error::{describe, exit},
    input, output,
};

/// Keeps the uprobe self-test target in the binary (`doctor` attaches to it).
#[used]
static PROBE_TARGET: extern "C" fn(u64) -> u64 = gdrtrace::gdrtrace_doctor_probe_target;

fn main() {
    // A panic is a bug; still, the user gets one line, not a backtrace.
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        errln!("gdrtrace: internal error{at}: {msg} (this is a bug)");
    }));
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind::*;
            if matches!(
                e.kind(),
                DisplayHelp | DisplayVersion | DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let to_stdout = e.kind() != DisplayHelpOnMissingArgumentOrSubcommand;
                if to_stdout {
                    gdrtrace::out!("{}", e.render());
                } else {
                    errln!("{}", e.render().to_string().trim_end());
                }
                output::flush_stdout();
                std::process::exit(if !to_stdout {
                    exit::USAGE
                } else if output::stdout_closed() {
                    exit::STDOUT_CLOSED
                } else if let Some(e) = output::stdout_error() {
                    errln!("gdrtrace: writing to standard output: {e}");
                    exit::FAILURE
                } else {
                    exit::OK
                });
            }
            errln!("{}", cli::usage_error(&e.render().to_string()));
            std::process::exit(exit::USAGE);
        }
    };
    // aya warns about each kernel feature probe it cannot run (without
    // CAP_BPF every one): noise beside the one line the failure gets.
    let level = match cli.verbose {
        0 => "warn,aya=error",
        1 => "info",
        _ => "debug",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level))
        .format_timestamp(None)
        // Log lines name processes and paths too: escaped as all output is.
        .format(|buf, rec| {
            use std::io::Write as _;
            let msg = rec.args().to_string();
            writeln!(buf, "[{} {}] {}", rec.level(), rec.target(), output::escape(&msg))
        })
        .init();
    if let Some(limit) = cli.command.max_input_size() {
        input::set_limit(limit);
    }
    let code = match cmd::dispatch(cli.command) {
        Ok(code) => code,
        Err(e) => {
            errln!("gdrtrace: {}", describe(&e));
            e.exit_code()
        }
    };
    output::flush_stdout();
    let code = match output::stdout_error() {
        Some(e) => {
            errln!("gdrtrace: writing to standard output: {e}");
            if code == exit::OK { exit::FAILURE } else { code }
        }
        None if output::stdout_closed() => exit::STDOUT_CLOSED,
        None => code,
    };
    std::process::exit(code);
}
