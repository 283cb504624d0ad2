//! `vm-run`: boot a cached Debian kernel with virtme-ng (`vng`) on the host's
//! root filesystem and run one command in it as root.
//!
//! The guest sees the host's `/` read-only with the repository root mounted
//! writable (and `--out`, if it lies elsewhere); the command runs from the
//! repository root. Its exit status is written to a file by a wrapper script
//! so it is told apart from a VM that died; a timeout kills the whole VM.
//!
//! QEMU/KVM cannot boot these kernels on some hosts (nested virtualisation
//! under Firecracker fails with an MSR error or "KVM internal error ...
//! emulation failure"). In `--kvm auto` mode a short KVM boot is tried once per
//! host kernel and the verdict cached in `target/vm/kvm-probe`; on failure
//! software emulation (`--disable-kvm`) is used.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::ValueEnum;

use crate::kernels::{self, Kernel, Series};
use crate::util::{repo_root, sh_quote, target_dir, which};

/// A probe boot with working KVM takes a few seconds; where /dev/kvm is
/// there but hangs (this project's CI hosts), every fresh clone waited
/// 90 s for it before falling back to emulation.
const KVM_PROBE_TIMEOUT: Duration = Duration::from_secs(30);
const KVM_PROBE_MARKER: &str = "xtask-kvm-probe-ok";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KvmMode {
    /// Use KVM if a probe boot works on this host (cached), else emulate.
    Auto,
    /// Always use KVM.
    On,
    /// Always use software emulation (TCG).
    Off,
}

/// VM settings shared by vm-run and vm-test.
#[derive(clap::Args, Clone, Debug)]
pub struct VmOpts {
    /// Kill the VM after this many seconds (boot included).
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Guest memory (vng --memory).
    #[arg(long, default_value = "2G")]
    pub memory: String,
    /// Guest CPUs.
    #[arg(long, default_value_t = 2)]
    pub cpus: u32,
    /// Hardware virtualisation.
    #[arg(long, value_enum, default_value = "auto")]
    pub kvm: KvmMode,
}

#[derive(clap::Args)]
pub struct Args {
    /// Kernel to boot (cached by vm-kernels; fetched if missing).
    #[arg(long, value_enum)]
    kernel: Series,
    /// Output directory (relative to the repository root unless absolute):
    /// created, writable in the guest, exported there as
    /// VM_OUT; the console log is saved to DIR/console.log.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Extra environment for the command, KEY=VALUE (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
    #[command(flatten)]
    vm: VmOpts,
    /// The command to run in the guest, from the repository root.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

pub fn main(args: &Args) -> Result<ExitCode> {
    let kernel = kernels::ensure(args.kernel, false)?;
    let mut env = Vec::new();
    for kv in &args.env {
        let (k, v) = kv
            .split_once('=')
            .filter(|(k, _)| is_env_name(k))
            .with_context(|| format!("--env {kv:?}: expected KEY=VALUE"))?;
        env.push((k.to_string(), v.to_string()));
    }
    let out = match &args.out {
        Some(dir) => Some(absolute(dir)?),
        None => None,
    };
    let req = RunRequest {
        kernel: &kernel,
        opts: &args.vm,
        out: out.as_deref(),
        env: &env,
        command: &args.command,
        prefix: None,
    };
    let outcome = run(&req)?;
    crate::progress::eprintln_beside!(
        "vm-run: {} exited {} after {:.1}s",
        kernel.release,
        outcome.code,
        outcome.wall.as_secs_f64()
    );
    Ok(ExitCode::from(u8::try_from(outcome.code).unwrap_or(1)))
}

fn is_env_name(k: &str) -> bool {
    !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Resolves `p` against the repository root if relative.
pub fn absolute(p: &Path) -> Result<PathBuf> {
    Ok(if p.is_absolute() {
        p.to_path_buf()
    } else {
        repo_root()?.join(p)
    })
}

pub struct RunRequest<'a> {
    pub kernel: &'a Kernel,
    pub opts: &'a VmOpts,
    /// Absolute output directory (made writable, exported as VM_OUT).
    pub out: Option<&'a Path>,
    pub env: &'a [(String, String)],
    pub command: &'a [String],
    /// Written before each line of the echoed console (VMs run side by
    /// side); None: the console is echoed as it comes.
    pub prefix: Option<&'a str>,
}

pub struct Outcome {
    /// The guest command's exit status.
    pub code: i32,
    pub wall: Duration,
}

/// `--kvm auto` resolved once, for VMs about to boot side by side (one
/// probe boot, not one per VM racing for the cache).
pub fn resolve_kvm(opts: &VmOpts, kernel: &Kernel) -> Result<VmOpts> {
    let mut opts = opts.clone();
    if opts.kvm == KvmMode::Auto {
        let vng = which("vng").context("`vng` not found on PATH; run scripts/install-vm-deps.sh")?;
        opts.kvm = if kvm_usable(&vng, kernel, &opts)? {
            KvmMode::On
        } else {
            KvmMode::Off
        };
    }
    Ok(opts)
}

/// Boots the VM and runs the command; `Err` when the VM itself failed or
/// timed out, `Ok` with the command's exit status otherwise.
pub fn run(req: &RunRequest) -> Result<Outcome> {
    let vng = which("vng").context("`vng` not found on PATH; run scripts/install-vm-deps.sh")?;
    let repo = repo_root()?;
    let disable_kvm = match req.opts.kvm {
        KvmMode::On => false,
        KvmMode::Off => true,
        KvmMode::Auto => !kvm_usable(&vng, req.kernel, req.opts)?,
    };

    // Scratch space for the wrapper script and the exit status.
    let scratch = target_dir()?
        .join("vm")
        .join("run")
        .join(format!("{}-{}", std::process::id(), req.kernel.release));
    if scratch.exists() {
        fs::remove_dir_all(&scratch).with_context(|| format!("cannot remove {}", scratch.display()))?;
    }
    fs::create_dir_all(&scratch).with_context(|| format!("cannot create {}", scratch.display()))?;
    let status_file = scratch.join("exit-status");
    let wrapper = scratch.join("run.sh");
    let mut script = String::from("#!/bin/sh\n# generated by cargo xtask vm-run\n");
    script += "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n";
    script += &format!("cd {} || exit 125\n", sh_quote(&repo.to_string_lossy()));
    if let Some(out) = req.out {
        fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
        script += &format!("export VM_OUT={}\n", sh_quote(&out.to_string_lossy()));
    }
    for (k, v) in req.env {
        script += &format!("export {k}={}\n", sh_quote(v));
    }
    let cmdline: Vec<String> = req.command.iter().map(|a| sh_quote(a)).collect();
    script += &cmdline.join(" ");
    script += &format!(
        "\nrc=$?\necho \"$rc\" > {}\nexit \"$rc\"\n",
        sh_quote(&status_file.to_string_lossy())
    );
    fs::write(&wrapper, script).with_context(|| format!("cannot write {}", wrapper.display()))?;

    let mut rw_dirs = vec![repo.clone()];
    if let Some(out) = req.out
        && !out.starts_with(&repo)
    {
        rw_dirs.push(out.to_path_buf());
    }
    let exec = format!("sh {}", sh_quote(&wrapper.to_string_lossy()));
    let console = req.out.map(|out| out.join("console.log"));
    // A VM that dies before its console prints anything never ran the
    // command (seen once in CI under software emulation: QEMU exited 255
    // at once); that is retried once. Anything later is the test's result.
    let mut attempt = 0;
    let result = loop {
        attempt += 1;
        let mut cmd = vng_command(&vng, req.kernel, req.opts, disable_kvm, &rw_dirs, &exec);
        cmd.current_dir(&repo);
        let log = match &console {
            Some(p) => Some(File::create(p).with_context(|| format!("cannot create {}", p.display()))?),
            None => None,
        };
        crate::progress::eprintln_beside!(
            "vm-run: booting {} ({}, timeout {}s): {}",
            req.kernel.release,
            if disable_kvm { "software emulation" } else { "KVM" },
            req.opts.timeout,
            req.command.join(" ")
        );
        let start = Instant::now();
        let res = supervise(cmd, Duration::from_secs(req.opts.timeout), log, Some(req.prefix))?;
        let wall = start.elapsed();
        let status = fs::read_to_string(&status_file).ok();
        let silent = console
            .as_ref()
            .is_some_and(|p| fs::metadata(p).map(|m| m.len() == 0).unwrap_or(true));
        if status.is_none() && !res.timed_out && silent && attempt == 1 {
            crate::progress::eprintln_beside!(
                "vm-run: the VM ({}) ended ({}) after {:.1}s without any console output; booting it again",
                req.kernel.release,
                res.status,
                wall.as_secs_f64()
            );
            continue;
        }
        break (res, wall, status);
    };
    let (res, wall, status) = result;
    // Best effort: the scratch dir only matters while the VM runs.
    let _ = fs::remove_dir_all(&scratch);
    if res.timed_out {
        bail!(
            "VM ({}) timed out after {}s and was killed",
            req.kernel.release,
            req.opts.timeout
        );
    }
    match status.as_deref().map(str::trim).map(str::parse::<i32>) {
        Some(Ok(code)) => Ok(Outcome { code, wall }),
        _ => bail!(
            "VM ({}) ended ({}) before the command reported an exit status",
            req.kernel.release,
            res.status
        ),
    }
}

fn vng_command(
    vng: &Path,
    kernel: &Kernel,
    opts: &VmOpts,
    disable_kvm: bool,
    rw_dirs: &[PathBuf],
    exec: &str,
) -> Command {
    let mut cmd = Command::new(vng);
    cmd.arg("--run").arg(kernel.vmlinuz());
    cmd.args(["--memory", &opts.memory]);
    cmd.args(["--cpus", &opts.cpus.to_string()]);
    cmd.args(["--user", "root"]);
    if disable_kvm {
        cmd.arg("--disable-kvm");
    }
    for d in rw_dirs {
        cmd.arg(format!("--rwdir={}", d.display()));
    }
    cmd.args(["--exec", exec]);
    cmd
}

struct Supervised {
    status: ExitStatus,
    timed_out: bool,
}

static STOP: AtomicBool = AtomicBool::new(false);
/// VMs being supervised now (several run side by side under `vm-test --jobs`).
static SUPERVISING: AtomicUsize = AtomicUsize::new(0);

/// Installs the SIGINT/SIGTERM handler once: while a VM runs it asks the
/// supervisor to kill the VM's process group; otherwise it exits at once.
fn install_interrupt_handler() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        // If another handler is already installed we simply do without ours.
        let _ = ctrlc::set_handler(|| {
            if SUPERVISING.load(Ordering::SeqCst) > 0 {
                STOP.store(true, Ordering::SeqCst);
            } else {
                std::process::exit(130);
            }
        });
    });
}

/// Runs `cmd` in its own process group, copying its output to ours (if
/// `echo`) and to `log`, and kills the group on timeout or interrupt.
/// `echo`: copy the output to ours, each line after the prefix if one is
/// given; None: to `log` only.
fn supervise(mut cmd: Command, timeout: Duration, log: Option<File>, echo: Option<Option<&str>>) -> Result<Supervised> {
    install_interrupt_handler();
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let what = crate::util::describe(&cmd);
    SUPERVISING.fetch_add(1, Ordering::SeqCst);
    let res = supervise_inner(&mut cmd, &what, timeout, log, echo);
    SUPERVISING.fetch_sub(1, Ordering::SeqCst);
    res
}

fn supervise_inner(
    cmd: &mut Command,
    what: &str,
    timeout: Duration,
    log: Option<File>,
    echo: Option<Option<&str>>,
) -> Result<Supervised> {
    let mut child = cmd.spawn().with_context(|| format!("cannot start `{what}`"))?;
    let log = log.map(|f| Arc::new(Mutex::new(f)));
    let mut pumps = Vec::new();
    let prefix = echo.flatten().map(str::to_string);
    if let Some(out) = child.stdout.take() {
        let sink = echo.map(|_| Box::new(std::io::stdout()) as _);
        pumps.push(pump(out, log.clone(), sink, prefix.clone()));
    }
    if let Some(err) = child.stderr.take() {
        let sink = echo.map(|_| Box::new(std::io::stderr()) as _);
        pumps.push(pump(err, log.clone(), sink, prefix));
    }

    let deadline = Instant::now() + timeout;
    let mut timed_out = false;
    let status = loop {
        if let Some(st) = child.try_wait().with_context(|| format!("cannot wait for `{what}`"))? {
            break st;
        }
        if STOP.load(Ordering::SeqCst) {
            kill_group(&mut child);
            let _ = child.wait();
            bail!("interrupted; VM killed");
        }
        if Instant::now() >= deadline {
            timed_out = true;
            kill_group(&mut child);
            break child.wait().with_context(|| format!("cannot wait for `{what}`"))?;
        }
        thread::sleep(Duration::from_millis(200));
    };
    // Stray grandchildren (qemu, virtiofsd) may hold the pipes open; make sure
    // the group is gone before joining the pumps.
    kill_group(&mut child);
    for p in pumps {
        let _ = p.join();
    }
    Ok(Supervised { status, timed_out })
}

fn kill_group(child: &mut Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: plain kill(2) on the process group we created with
        // process_group(0); a stale group yields ESRCH, which is ignored.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}

type Sink = Box<dyn Write + Send>;

/// Copies `src` to `log` and to `echo`; with a prefix, `echo` gets whole
/// lines, each after the prefix (the rest of a last line at the end).
fn pump(
    mut src: impl Read + Send + 'static,
    log: Option<Arc<Mutex<File>>>,
    mut echo: Option<Sink>,
    prefix: Option<String>,
) -> JoinHandle<()> {
    thread::spawn(move || {
        let mut buf = [0u8; 8192];
        let mut line = Vec::new();
        loop {
            let n = match src.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if let Some(e) = echo.as_mut() {
                match &prefix {
                    None => crate::progress::beside_status(&mut **e, &buf[..n]),
                    Some(p) => {
                        for &b in &buf[..n] {
                            line.push(b);
                            if b == b'\n' {
                                let mut whole = p.as_bytes().to_vec();
                                whole.append(&mut line);
                                crate::progress::beside_status(&mut **e, &whole);
                            }
                        }
                    }
                }
            }
            if let Some(l) = &log
                && let Ok(mut f) = l.lock()
            {
                let _ = f.write_all(&buf[..n]);
            }
        }
        if let (Some(e), Some(p)) = (echo.as_mut(), &prefix)
            && !line.is_empty()
        {
            let mut whole = p.as_bytes().to_vec();
            whole.append(&mut line);
            whole.push(b'\n');
            crate::progress::beside_status(&mut **e, &whole);
        }
    })
}

/// `--kvm auto`: is KVM usable on this host? Cached per host kernel release.
fn kvm_usable(vng: &Path, kernel: &Kernel, opts: &VmOpts) -> Result<bool> {
    if File::options().read(true).write(true).open("/dev/kvm").is_err() {
        crate::progress::eprintln_beside!("vm-run: /dev/kvm not usable; using software emulation");
        return Ok(false);
    }
    let host = fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let cache = target_dir()?.join("vm").join("kvm-probe");
    if let Ok(text) = fs::read_to_string(&cache) {
        let mut lines = text.lines();
        if lines.next() == Some(&format!("host={host}")) {
            match lines.next() {
                Some("kvm=ok") => return Ok(true),
                Some("kvm=fail") => {
                    crate::progress::eprintln_beside!(
                        "vm-run: KVM fails on this host (cached in {}); using software emulation",
                        cache.display()
                    );
                    return Ok(false);
                }
                _ => {}
            }
        }
    }

    crate::progress::eprintln_beside!("vm-run: probing KVM with a short boot of {}", kernel.release);
    let scratch = target_dir()?.join("vm");
    fs::create_dir_all(&scratch).with_context(|| format!("cannot create {}", scratch.display()))?;
    let log_path = scratch.join("kvm-probe.log");
    let log = File::create(&log_path).with_context(|| format!("cannot create {}", log_path.display()))?;
    let probe_opts = VmOpts {
        timeout: KVM_PROBE_TIMEOUT.as_secs(),
        ..opts.clone()
    };
    let exec = format!("echo {KVM_PROBE_MARKER}");
    let cmd = vng_command(vng, kernel, &probe_opts, false, &[], &exec);
    let t = Instant::now();
    let res = supervise(cmd, KVM_PROBE_TIMEOUT, Some(log), None)?;
    let output = fs::read_to_string(&log_path).unwrap_or_default();
    let ok = res.status.success() && !res.timed_out && output.contains(KVM_PROBE_MARKER);
    let reason = if ok {
        String::new()
    } else if res.timed_out {
        format!("timed out after {}s", KVM_PROBE_TIMEOUT.as_secs())
    } else {
        output
            .lines()
            .find(|l| l.contains("KVM") || l.contains("qemu-system") || l.contains("error"))
            .unwrap_or("no output")
            .trim()
            .to_string()
    };
    let verdict = if ok { "ok" } else { "fail" };
    fs::write(&cache, format!("host={host}\nkvm={verdict}\nreason={reason}\n"))
        .with_context(|| format!("cannot write {}", cache.display()))?;
    if ok {
        crate::progress::eprintln_beside!("vm-run: KVM works ({:.1}s probe)", t.elapsed().as_secs_f64());
    } else {
        crate::progress::eprintln_beside!(
            "vm-run: KVM boot failed in {:.1}s ({reason}); using software emulation (log: {})",
            t.elapsed().as_secs_f64(),
            log_path.display()
        );
    }
    Ok(ok)
}
