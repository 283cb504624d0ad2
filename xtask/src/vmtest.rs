//! `vm-test`: run `tests/vm/guest.sh` (and through it `tests/vm/checks/*.sh`)
//! in a VM for each selected kernel, results in `target/vm-results/<release>/`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::kernels::{self, Selection};
use crate::util::{repo_root, target_dir};
use crate::vm::{self, RunRequest, VmOpts};

const GUEST_SCRIPT: &str = "tests/vm/guest.sh";

#[derive(clap::Args)]
pub struct Args {
    /// Which kernel(s) to test on.
    #[arg(long, value_enum, default_value = "all")]
    kernel: Selection,
    /// The gdrtrace binary the checks run (relative to the repository root
    /// unless absolute). It is not built by this command.
    #[arg(long, value_name = "PATH", default_value = "target/debug/gdrtrace")]
    bin: PathBuf,
    /// Run only the checks whose name starts with this (e.g. `00-rxe`);
    /// repeatable. Default: all of tests/vm/checks/*.sh.
    #[arg(long = "check", value_name = "NAME")]
    checks: Vec<String>,
    /// Kernels booted at once: 2 boots both side by side, their console
    /// lines each after the kernel's name (on a 2-core host under software
    /// emulation, the tier in the time of its slower kernel).
    #[arg(long, value_name = "N", default_value_t = 1)]
    jobs: usize,
    /// Boot before the binary is built: each guest waits for this file to
    /// exist (relative to the repository root unless absolute) before its
    /// checks, within the VM's --timeout (scripts/test.sh makes it when its
    /// release build is done, so kernel fetch and boot overlap the builds).
    #[arg(long, value_name = "PATH")]
    wait_for: Option<PathBuf>,
    #[command(flatten)]
    vm: VmOpts,
}

struct Row {
    series: &'static str,
    release: String,
    verdict: String,
    wall: Option<Duration>,
    counts: String,
}

pub fn main(args: &Args) -> Result<ExitCode> {
    let repo = repo_root()?;
    let bin = vm::absolute(&args.bin)?;
    let wait_for = args.wait_for.as_deref().map(vm::absolute).transpose()?;
    if wait_for.is_none() && !is_executable(&bin) {
        bail!(
            "gdrtrace binary {} is missing or not executable (build it first, e.g. `cargo build -p tracer`, or pass --bin)",
            bin.display()
        );
    }
    let guest = repo.join(GUEST_SCRIPT);
    if !guest.is_file() {
        bail!("{} is missing", guest.display());
    }

    // Fetch every kernel first so a download problem fails before any boot.
    let kernels: Vec<_> = args
        .kernel
        .series()
        .into_iter()
        .map(|s| kernels::ensure(s, false))
        .collect::<Result<_>>()?;

    let mut env = vec![("GDRTRACE".to_string(), bin.to_string_lossy().into_owned())];
    if let Some(bad) = args
        .checks
        .iter()
        .find(|c| c.is_empty() || c.contains(|ch: char| ch.is_whitespace() || "/*?[".contains(ch)))
    {
        bail!("--check {bad:?}: expected a check name such as 00-rxe");
    }
    if !args.checks.is_empty() {
        env.push(("VM_CHECKS".to_string(), args.checks.join(" ")));
    }
    if let Some(w) = &wait_for {
        env.push(("WAIT_FOR".to_string(), w.to_string_lossy().into_owned()));
        env.push(("WAIT_LIMIT".to_string(), args.vm.timeout.to_string()));
    }
    // Each check's limit inside the guest (tests/vm/guest.sh, 300 s unless
    // set): a slower VM (one at a low CPU priority) is given more.
    if let Ok(t) = std::env::var("CHECK_TIMEOUT") {
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            bail!("CHECK_TIMEOUT={t:?}: expected seconds");
        }
        env.push(("CHECK_TIMEOUT".to_string(), t));
    }
    let command = vec!["sh".to_string(), GUEST_SCRIPT.to_string()];
    let jobs = args.jobs.clamp(1, kernels.len().max(1));
    let rows: Vec<Row> = if jobs == 1 {
        kernels
            .iter()
            .map(|k| one_kernel(k, &args.vm, &env, &command, None))
            .collect::<Result<_>>()?
    } else {
        // Side by side: one KVM decision for all, each console line after
        // its kernel's name; the rows in the order of the kernels.
        let opts = vm::resolve_kvm(&args.vm, &kernels[0])?;
        let started = std::time::Instant::now();
        let live = crate::progress::live(format!("vm-test: {} kernels side by side", kernels.len()), started);
        let rows = std::thread::scope(|scope| {
            let mut rows = Vec::new();
            for chunk in kernels.chunks(jobs) {
                let handles: Vec<_> = chunk
                    .iter()
                    .map(|k| {
                        let (opts, env, command) = (&opts, &env, &command);
                        let prefix = format!("[{}] ", k.series.name());
                        scope.spawn(move || one_kernel(k, opts, env, command, Some(&prefix)))
                    })
                    .collect();
                for h in handles {
                    rows.push(
                        h.join()
                            .unwrap_or_else(|_| Err(anyhow::anyhow!("a VM thread panicked"))),
                    );
                }
            }
            rows.into_iter().collect::<Result<Vec<Row>>>()
        })?;
        drop(live);
        rows
    };

    let width = rows.iter().map(|r| r.release.len()).max().unwrap_or(0);
    println!("vm-test summary (results in target/vm-results/<release>/):");
    for r in &rows {
        let wall = r
            .wall
            .map(|w| format!("{:.1}s", w.as_secs_f64()))
            .unwrap_or_else(|| "-".to_string());
        println!(
            "  {:<5} {:<width$}  {:<16} {:>7}  checks: {}",
            r.series, r.release, r.verdict, wall, r.counts
        );
    }
    let mut failed = rows.iter().filter(|r| r.verdict != "PASS").count();
    if rows.len() > 1 {
        let releases: Vec<String> = rows.iter().map(|r| r.release.clone()).collect();
        let dir = target_dir()?.join("vm-results");
        match crate::matrix::build(&dir, &releases) {
            Ok((md, unexplained)) => {
                let path = dir.join("matrix.md");
                fs::write(&path, &md).with_context(|| format!("writing {}", path.display()))?;
                println!("{md}");
                println!("vm-test: probe matrix written to target/vm-results/matrix.md");
                if unexplained > 0 {
                    println!("vm-test: {unexplained} matrix differences have no reason");
                    failed += 1;
                }
            }
            Err(e) => {
                println!("vm-test: no probe matrix: {e:#}");
                failed += 1;
            }
        }
        // The kernel-upgrade example: oldest kernel's baseline vs newest's.
        if let (Some(first), Some(last)) = (rows.first(), rows.last())
            && let Err(e) = crate::upgrade::compare(&bin, &dir, &first.release, &last.release)
        {
            println!("vm-test: kernel upgrade comparison: {e:#}");
            failed += 1;
        }
    }
    println!(
        "vm-test kernels: {} passed, {failed} failed",
        rows.len().saturating_sub(failed)
    );
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Boots `k`, runs the checks in it (a VM that stops answering is booted
/// once more) and returns its row; `prefix` is written before each console
/// line when VMs run side by side.
fn one_kernel(
    k: &kernels::Kernel,
    opts: &VmOpts,
    env: &[(String, String)],
    command: &[String],
    prefix: Option<&str>,
) -> Result<Row> {
    let out = target_dir()?.join("vm-results").join(&k.release);
    if out.exists() {
        fs::remove_dir_all(&out).with_context(|| format!("cannot clear {}", out.display()))?;
    }
    eprintln!("vm-test: === {} ({}): started ===", k.series.name(), k.release);
    let started = std::time::Instant::now();
    let live = prefix
        .is_none()
        .then(|| crate::progress::live(format!("vm-test: {} ({})", k.series.name(), k.release), started))
        .flatten();
    let req = RunRequest {
        kernel: k,
        opts,
        out: Some(&out),
        env,
        command,
        prefix,
    };
    // A guest that stops answering (the VM killed at its timeout, as a
    // Debian 6.1 guest under software emulation once did during its
    // first BPF check) is booted once more; the verdict says so. A
    // check that fails is never retried.
    let mut retried = "";
    let mut result = vm::run(&req);
    if let Err(e) = &result {
        eprintln!("vm-test: {}: {e:#}; booting it once more", k.release);
        if out.exists() {
            fs::remove_dir_all(&out).with_context(|| format!("cannot clear {}", out.display()))?;
        }
        retried = " (after a VM that stopped answering: booted twice)";
        result = vm::run(&req);
    }
    let (verdict, wall) = match result {
        Ok(o) if o.code == 0 => (format!("PASS{retried}"), Some(o.wall)),
        Ok(o) => (format!("FAIL (exit {}){retried}", o.code), Some(o.wall)),
        Err(e) => {
            eprintln!("vm-test: {}: {e:#}", k.release);
            (format!("FAIL (VM error){retried}"), None)
        }
    };
    drop(live);
    eprintln!(
        "vm-test: {} ({}): {verdict} after {:.1} s",
        k.series.name(),
        k.release,
        started.elapsed().as_secs_f64()
    );
    // guest.sh writes its closing "N passed, M failed" line here.
    let counts = fs::read_to_string(out.join("summary.txt"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "no summary".to_string());
    Ok(Row {
        series: k.series.name(),
        release: k.release.clone(),
        verdict,
        wall,
        counts,
    })
}

fn is_executable(p: &std::path::Path) -> bool {
    fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
