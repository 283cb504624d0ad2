//! Developer tasks for gdrtrace: `cargo xtask <command>`.
//!
//! The VM tier proves kernel probes on stock Debian kernels, which the host
//! kernel cannot: `vm-kernels` caches the kernels, `vm-run` boots one with
//! virtme-ng and runs a command in it, `vm-test` runs `tests/vm/guest.sh`.

mod bench;
mod documents;
mod kernels;
mod matrix;
mod progress;
mod soak;
mod upgrade;
mod util;
mod vm;
mod vmtest;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "xtask", about = "gdrtrace developer tasks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// The variants mirror the command names (vm-kernels, vm-run, vm-test).
#[allow(clippy::enum_variant_names)]
#[derive(Subcommand)]
enum Cmd {
    /// Resolve, download, unpack and cache the Debian test kernels.
    VmKernels(kernels::Args),
    /// Boot a cached kernel with virtme-ng and run a command in it as root.
    VmRun(vm::Args),
    /// Run tests/vm/guest.sh (and its checks) in a VM per kernel.
    VmTest(vmtest::Args),
    /// Measure the tracer's cost on this host (docs/perf.md).
    Bench(bench::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::VmKernels(args) => kernels::main(&args),
        Cmd::VmRun(args) => vm::main(&args),
        Cmd::VmTest(args) => vmtest::main(&args),
        Cmd::Bench(args) => bench::main(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
