//! `gdrtrace`: parse, dispatch, and turn every failure into one line.
use clap::Parser as _;
use gdrtrace::{cli::Cli, cmd};

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
        eprintln!("gdrtrace: internal error{at}: {msg} (this is a bug)");
    }));
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind::*;
            if matches!(
                e.kind(),
                DisplayHelp | DisplayVersion | DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                std::process::exit(if e.kind() == DisplayHelpOnMissingArgumentOrSubcommand {
                    2
                } else {
                    0
                });
            }
            let text = e.render().to_string();
            let first = text
                .lines()
                .next()
                .unwrap_or("invalid arguments")
                .trim_start_matches("error: ");
            eprintln!("gdrtrace: {first} (see 'gdrtrace --help')");
            std::process::exit(2);
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
        .init();
    let code = match cmd::dispatch(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gdrtrace: {}", gdrtrace::error::describe(&e));
            1
        }
    };
    std::process::exit(code);
}
