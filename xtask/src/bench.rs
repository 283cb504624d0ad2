//! `cargo xtask bench`: the tracer's cost on this host, measured against
//! the release binary. Ratios are taken inside one run (traced and untraced
//! rounds interleaved, alternating which goes first), never asserted: these
//! machines are noisy. Results go to `target/bench/host.json` and a Markdown
//! summary to stdout (docs/perf.md holds the current figures,
//! docs/validation/2026-12-perf-history.md the dated ones).
//!
//! Scenarios:
//! - pin-churn: `drive pin-churn` untraced vs under `run`, its own elapsed
//!   time; ratio of medians and median of per-round ratios; drops.
//! - pipeline: `bench pipeline` paced at rising rates: events/s delivered
//!   and drops at each, and the highest rate delivered without loss.
//! - detach: `bench detach` for N points as uprobe_multi links and as
//!   per-point links.
//! - attach + SIGINT on a pin-churn loop: signal to report, signal to exit,
//!   drops.
//! - run: from the traced command's exit to the report and to exit.
//! - duty: `bench duty` (calls of 20 us with a probed stand-in collective
//!   against an unprobed twin, alternating windows) with `--collectives
//!   exact` and `auto`: per-call cost and the share of calls that trapped.
//! - network: `bench network` (`drive tcp` over loopback traced with the
//!   network probes against the lifecycle probes alone and an off/off
//!   pair of the latter, rounds interleaved), with 64 KiB and with 1 KiB
//!   sends: elapsed and CPU ratios.
//! - soak (only with `--only soak`): `serve` under short-lived traced
//!   processes for a fixed time, its RSS and CPU (soak.rs).
use std::{
    io::Read as _,
    path::PathBuf,
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use crate::{
    documents::{
        AttachSigint, Detach, Duty, Host, Network, PinChurn, Pipeline, PipelineRun, Ratios, Report, RunExit, UprobeHit,
    },
    util,
};
use anyhow::{Context as _, Result, bail};

#[derive(clap::Args)]
pub struct Args {
    /// The gdrtrace binary to measure.
    #[arg(long, default_value = "target/release/gdrtrace")]
    bin: PathBuf,
    /// Interleaved rounds of the pin-churn comparison.
    #[arg(long, default_value_t = 7)]
    rounds: usize,
    /// pin-churn iterations per round.
    #[arg(long, default_value_t = 300_000)]
    iterations: u32,
    /// Repetitions of the signal and exit timings.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Run only these scenarios (comma-separated: pin-churn, pipeline,
    /// detach, uprobe-hit, attach-sigint, run-exit, duty, network; soak runs
    /// only when named alone).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Window pairs (5 s each side) of the duty scenario, per mode.
    #[arg(long, default_value_t = 12)]
    duty_pairs: u32,
    /// Minutes of the soak.
    #[arg(long, default_value_t = 10.0)]
    soak_minutes: f64,
    /// Short-lived traced processes started per minute in the soak.
    #[arg(long, default_value_t = 1000)]
    soak_per_minute: u32,
}

pub fn main(a: &Args) -> Result<std::process::ExitCode> {
    if !a.bin.is_file() {
        bail!(
            "{} is missing: build it first (cargo build --release -p tracer)",
            a.bin.display()
        );
    }
    let started = Instant::now();
    let date = util::run_output(Command::new("date").arg("-u").arg("+%Y-%m-%d %H:%M UTC"))?;
    if a.only == ["soak"] {
        let v = crate::soak::soak(&a.bin, a.soak_minutes, a.soak_per_minute)?;
        let dir = util::target_dir()?.join("bench");
        std::fs::write(dir.join("soak.json"), serde_json::to_string_pretty(&v)?)?;
        println!("{}", crate::soak::markdown(&v, date.trim(), &machine()));
        eprintln!("xtask bench: results in {}", dir.join("soak.json").display());
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let want = |s: &str| a.only.is_empty() || a.only.iter().any(|o| o == s);
    let mut out = Host {
        machine: machine(),
        date: date.trim().to_string(),
        pin_churn: want("pin-churn").then(|| pin_churn(a)).transpose()?,
        pipeline: want("pipeline").then(|| pipeline(a)).transpose()?,
        detach: want("detach").then(|| detach(a)).transpose()?,
        uprobe_hit: want("uprobe-hit").then(|| uprobe_hit(a)).transpose()?,
        attach_sigint: want("attach-sigint").then(|| attach_sigint(a)).transpose()?,
        run_exit: want("run-exit").then(|| run_exit(a)).transpose()?,
        duty: want("duty").then(|| duty(a)).transpose()?,
        network: None,
        seconds: 0.0,
    };
    out.network = want("network").then(|| network(a)).transpose()?;
    out.seconds = started.elapsed().as_secs_f64();
    let dir = util::target_dir()?.join("bench");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("host.json"), serde_json::to_string_pretty(&out)?)?;
    println!("{}", markdown(&out));
    eprintln!("xtask bench: results in {}", dir.join("host.json").display());
    Ok(std::process::ExitCode::SUCCESS)
}

fn machine() -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpus = thread::available_parallelism().map_or(0, |n| n.get());
    format!("{} CPUs, kernel {}", cpus, kernel.trim())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// `pin-churn: elapsed X s, cpu Y s` from a workload's output: (wall, CPU).
fn churn_elapsed(out: &str) -> Result<(f64, f64)> {
    out.lines()
        .find_map(|l| {
            let rest = l.strip_prefix("pin-churn: elapsed ")?;
            let wall = rest.split(' ').next()?.parse().ok()?;
            let cpu = rest.split("cpu ").nth(1)?.split(' ').next()?.parse().ok()?;
            Some((wall, cpu))
        })
        .context("no 'pin-churn: elapsed X s, cpu Y s' line")
}

/// One measured quantity over interleaved rounds: the medians, their
/// ratio, and the median of per-round ratios.
fn ratios(off: &[f64], on: &[f64]) -> Ratios {
    let (m_off, m_on) = (median(&mut off.to_vec()), median(&mut on.to_vec()));
    let mut per: Vec<f64> = on.iter().zip(off).map(|(a, b)| a / b).collect();
    Ratios {
        untraced: off.to_vec(),
        traced: on.to_vec(),
        median_untraced: m_off,
        median_traced: m_on,
        ratio_of_medians: m_on / m_off,
        median_of_ratios: median(&mut per),
    }
}

/// A report gdrtrace wrote, read into the slice xtask uses.
fn read_report(path: &std::path::Path) -> Result<Report> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing the report {}", path.display()))
}

fn pin_churn(a: &Args) -> Result<PinChurn> {
    let tmp = std::env::temp_dir().join(format!("xtask-bench-{}.json", std::process::id()));
    // (wall s, CPU s, events, drops) of one run.
    let churn = |traced: bool| -> Result<(f64, f64, u64, u64)> {
        let mut cmd = Command::new(&a.bin);
        if traced {
            cmd.args(["run", "--no-installed-libraries", "--json"])
                .arg(&tmp)
                .arg("--")
                .arg(&a.bin);
        }
        cmd.args(["drive", "pin-churn", "--odirect-mib", "0", "--iterations"])
            .arg(a.iterations.to_string());
        let (wall, cpu) = churn_elapsed(&util::run_output(&mut cmd)?)?;
        if !traced {
            return Ok((wall, cpu, 0, 0));
        }
        let r = read_report(&tmp)?;
        let events: u64 = r
            .operations
            .iter()
            .filter(|o| o.name.starts_with("io_uring_register"))
            .map(|o| o.calls)
            .sum();
        Ok((wall, cpu, events, r.loss.ringbuf_drops))
    };
    let (mut wall, mut cpu) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
    let (mut events, mut drops) = (0, 0);
    for round in 0..a.rounds {
        // Alternate which goes first, so drift does not favour either.
        let order = if round % 2 == 0 { [false, true] } else { [true, false] };
        for traced in order {
            let (w, c, e, d) = churn(traced)?;
            events += e;
            drops += d;
            if traced {
                wall.1.push(w);
                cpu.1.push(c);
            } else {
                wall.0.push(w);
                cpu.0.push(c);
            }
        }
        eprintln!(
            "xtask bench: pin-churn round {}: untraced {:.3} s (cpu {:.3}), traced {:.3} s (cpu {:.3})",
            round + 1,
            wall.0[round],
            cpu.0[round],
            wall.1[round],
            cpu.1[round]
        );
    }
    let _ = std::fs::remove_file(&tmp);
    Ok(PinChurn {
        iterations: a.iterations,
        rounds: a.rounds,
        wall_s: ratios(&wall.0, &wall.1),
        cpu_s: ratios(&cpu.0, &cpu.1),
        events_delivered: events,
        ringbuf_drops: drops,
        expected_events: 2 * a.iterations as u64 * a.rounds as u64,
    })
}

fn pipeline(a: &Args) -> Result<Pipeline> {
    let mut rows = Vec::new();
    let mut best = 0.0f64;
    // One generator thread at rising rates, then unpaced with one and with
    // two threads: a traced thread's own syscall cost caps what one thread
    // can ask for, below what the reader can take.
    let runs = [250_000u64, 500_000, 1_000_000, 1_500_000, 2_000_000, 0]
        .map(|rate| (rate, 1u32))
        .into_iter()
        .chain([(0, 2)]);
    for (rate, threads) in runs {
        // About two seconds of events at the paced rates.
        let calls = if rate == 0 {
            4_000_000
        } else {
            (rate * 2).max(1_000_000)
        };
        let v: PipelineRun = bench_json(Command::new(&a.bin).args([
            "bench",
            "pipeline",
            "--calls",
            &calls.to_string(),
            "--rate",
            &rate.to_string(),
            "--threads",
            &threads.to_string(),
        ]))?;
        eprintln!(
            "xtask bench: pipeline at {rate}/s, {threads} thread(s): {:.0} events/s, {} drops",
            v.events_per_s, v.ringbuf_drops
        );
        if v.ringbuf_drops == 0 && v.delivered == calls {
            best = best.max(v.events_per_s);
        }
        rows.push(v);
    }
    Ok(Pipeline {
        runs: rows,
        best_lossless_events_per_s: best,
    })
}

/// The JSON object a `gdrtrace bench ...` command prints last on stdout
/// (its stderr line is dropped), read into its row type.
fn bench_json<T: serde::de::DeserializeOwned>(cmd: &mut Command) -> Result<T> {
    let out = util::run_output(cmd.stderr(Stdio::null()))?;
    let line = out
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .with_context(|| format!("no JSON from {cmd:?}"))?;
    serde_json::from_str(line).with_context(|| format!("parsing the JSON of {cmd:?}: {line}"))
}

/// What one probed collective costs per call (`gdrtrace bench uprobe-hit`).
fn uprobe_hit(a: &Args) -> Result<UprobeHit> {
    let v: UprobeHit = bench_json(Command::new(&a.bin).args(["bench", "uprobe-hit"]))?;
    eprintln!("xtask bench: uprobe hit {:.0} ns per probed call", v.ns_per_hit);
    Ok(v)
}

/// What probed collectives cost a job of 20 us calls, every call trapped
/// (`exact`) and duty-cycled (`auto`): `bench duty`, `--duty-pairs` pairs of
/// 5 s windows each.
fn duty(a: &Args) -> Result<Vec<Duty>> {
    let mut rows = Vec::new();
    for mode in ["exact", "auto"] {
        let v: Duty = bench_json(Command::new(&a.bin).args([
            "bench",
            "duty",
            "--collectives",
            mode,
            "--pairs",
            &a.duty_pairs.to_string(),
        ]))?;
        eprintln!(
            "xtask bench: duty {mode}: probed/unprobed {:.4}, {:.2}% of calls trapped",
            v.ratio_of_sums,
            v.trapped_share * 100.0
        );
        rows.push(v);
    }
    Ok(rows)
}

/// What the network probes cost a clean TCP job (`gdrtrace bench network`),
/// with large sends and with small ones (a send hook hit each).
fn network(a: &Args) -> Result<Vec<Network>> {
    let mut rows = Vec::new();
    for (bytes, chunk) in [("512M", "64K"), ("64M", "1K")] {
        let v: Network = bench_json(Command::new(&a.bin).args([
            "bench",
            "network",
            "--bytes",
            bytes,
            "--chunk",
            chunk,
            "--rounds",
            &a.rounds.to_string(),
        ]))?;
        eprintln!(
            "xtask bench: network {bytes} in {chunk} sends: elapsed ratio {:.3} (off/off {:.3}), CPU ratio {:.3} (off/off {:.3})",
            v.elapsed_s.ratio_of_medians,
            v.elapsed_s_off_off.median_of_ratios,
            v.cpu_s.ratio_of_medians,
            v.cpu_s_off_off.median_of_ratios
        );
        rows.push(v);
    }
    Ok(rows)
}

fn detach(a: &Args) -> Result<Vec<Detach>> {
    let mut rows = Vec::new();
    for (points, per_point) in [(28, false), (200, false), (1000, false), (28, true)] {
        let mut cmd = Command::new(&a.bin);
        cmd.args(["bench", "detach", "--points", &points.to_string()]);
        if per_point {
            cmd.arg("--per-point");
        }
        let v: Detach = bench_json(&mut cmd)?;
        eprintln!(
            "xtask bench: detach {points} points {}: close {:.0} ms",
            v.mode, v.close_ms
        );
        rows.push(v);
    }
    Ok(rows)
}

struct Reaped(Child);
impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn attach_sigint(a: &Args) -> Result<Vec<AttachSigint>> {
    let tmp = std::env::temp_dir().join(format!("xtask-bench-attach-{}.json", std::process::id()));
    let mut rows = Vec::new();
    for _ in 0..a.repeats {
        let churn = Reaped(
            Command::new(&a.bin)
                .args(["drive", "pin-churn", "--odirect-mib", "0", "--iterations", "1000000000"])
                .stdout(Stdio::null())
                .spawn()?,
        );
        let mut tracer = Command::new(&a.bin)
            .args(["attach", "--pid", &churn.0.id().to_string(), "--json"])
            .arg(&tmp)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let stderr = util::timed_lines(tracer.stderr.take().context("stderr")?);
        let mut stdout = tracer.stdout.take().context("stdout")?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match stderr.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok((_, l)) if l.contains("attached to") => break,
                Ok(_) => {}
                Err(_) => bail!("attach did not report being attached within 60 s"),
            }
        }
        thread::sleep(Duration::from_secs(4));
        let signalled = Instant::now();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(tracer.id() as i32, libc::SIGINT) };
        let mut first = [0u8; 1];
        stdout.read_exact(&mut first).context("the report never came")?;
        let report = signalled.elapsed();
        let mut rest = Vec::new();
        stdout.read_to_end(&mut rest)?;
        tracer.wait()?;
        let exit = signalled.elapsed();
        let r = read_report(&tmp)?;
        let close = stderr
            .try_iter()
            .find(|(_, l)| l.contains("closed"))
            .map(|(_, l)| l)
            .unwrap_or_default();
        let row = AttachSigint {
            signal_to_report_ms: report.as_secs_f64() * 1e3,
            signal_to_exit_ms: exit.as_secs_f64() * 1e3,
            ringbuf_drops: r.loss.ringbuf_drops,
            complete: r.loss.complete,
            close,
        };
        eprintln!("xtask bench: attach+SIGINT: {}", serde_json::to_string(&row)?);
        rows.push(row);
    }
    let _ = std::fs::remove_file(&tmp);
    Ok(rows)
}

fn run_exit(a: &Args) -> Result<Vec<RunExit>> {
    let mut rows = Vec::new();
    for _ in 0..a.repeats {
        // The traced command says when it exits (a line on the shared stderr).
        let mut tracer = Command::new(&a.bin)
            .args(["run", "--", "sh", "-c", "sleep 1; echo bench-exit >&2"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let stderr = util::timed_lines(tracer.stderr.take().context("stderr")?);
        let stdout = util::timed_lines(tracer.stdout.take().context("stdout")?);
        let exited = loop {
            match stderr.recv_timeout(Duration::from_secs(60)) {
                Ok((t, l)) if l.contains("bench-exit") => break t,
                Ok(_) => {}
                Err(_) => bail!("the traced command never said it exited"),
            }
        };
        let (report, _) = stdout.recv_timeout(Duration::from_secs(60)).context("no report")?;
        tracer.wait()?;
        let done = Instant::now();
        rows.push(RunExit {
            exit_to_report_ms: report.saturating_duration_since(exited).as_secs_f64() * 1e3,
            exit_to_tracer_exit_ms: done.saturating_duration_since(exited).as_secs_f64() * 1e3,
        });
    }
    Ok(rows)
}

fn markdown(v: &Host) -> String {
    // A median of no rounds is NaN (null in host.json): printed as "-".
    let f = |x: f64| {
        if x.is_finite() { format!("{x:.3}") } else { "-".into() }
    };
    let mut s = format!("Host benchmarks, {} ({}):\n\n", v.date, v.machine);
    if let Some(c) = &v.pin_churn {
        s += &format!(
            "- pin-churn ({} iterations, {} rounds interleaved; events {} of {}, ring-buffer drops {}):\n",
            c.iterations, c.rounds, c.events_delivered, c.expected_events, c.ringbuf_drops
        );
        for (m, what) in [(&c.wall_s, "elapsed"), (&c.cpu_s, "CPU time")] {
            s += &format!(
                "  - {what}: untraced median {} s, traced median {} s, ratio of medians {}, median of per-round ratios {}\n",
                f(m.median_untraced),
                f(m.median_traced),
                f(m.ratio_of_medians),
                f(m.median_of_ratios),
            );
        }
    }
    if let Some(p) = &v.pipeline {
        s += "- pipeline (getppid through the syscall programs):\n\n  | asked/s | threads | delivered/s | delivered | drops | tracer CPU us/event |\n  |---|---|---|---|---|---|\n";
        for r in &p.runs {
            s += &format!(
                "  | {} | {} | {:.0} | {} of {} | {} | {:.2} |\n",
                if r.rate == 0 {
                    "unpaced".to_string()
                } else {
                    r.rate.to_string()
                },
                r.threads,
                r.events_per_s,
                r.delivered,
                r.calls,
                r.ringbuf_drops,
                r.tracer_cpu_us_per_event
            );
        }
        s += &format!(
            "\n  highest lossless rate: {:.0} events/s\n",
            p.best_lossless_events_per_s
        );
    }
    if let Some(h) = &v.uprobe_hit {
        s += &format!(
            "- uprobe hit (entry-only, summed in the kernel, as a collective; {}): {} ns per probed call (rounds {}-{}), unprobed call {} ns; the kernel counted {} calls\n",
            h.mode,
            f(h.ns_per_hit),
            f(h.ns_per_hit_min),
            f(h.ns_per_hit_max),
            f(h.unprobed_ns_per_call),
            h.counted_calls
        );
    }
    if let Some(rows) = &v.detach {
        s += "- detach:\n\n  | points | mode | links | attach ms | close ms |\n  |---|---|---|---|---|\n";
        for r in rows {
            s += &format!(
                "  | {} | {} | {} | {} | {} |\n",
                r.points,
                r.mode,
                r.links,
                f(r.attach_ms),
                f(r.close_ms)
            );
        }
    }
    if let Some(rows) = &v.attach_sigint {
        s += "- attach to a pin-churn loop, SIGINT after 4 s:\n";
        for r in rows {
            s += &format!(
                "  - signal to report {} ms, to exit {} ms, drops {}, complete {}\n",
                f(r.signal_to_report_ms),
                f(r.signal_to_exit_ms),
                r.ringbuf_drops,
                r.complete
            );
        }
    }
    if let Some(rows) = &v.duty {
        s += "- duty (calls of 20 us, probed stand-in collective against an unprobed twin, alternating 5 s windows):

  | --collectives | link | probed/unprobed (all windows) | median of pairs | calls trapped | traps/s | off phases |
  |---|---|---|---|---|---|---|
";
        for r in rows {
            s += &format!(
                "  | {} | {} | {} | {} | {:.2}% of {} | {:.0} | {} |\n",
                r.collectives,
                r.link_mode,
                f(r.ratio_of_sums),
                f(r.median_pair_ratio),
                r.trapped_share * 100.0,
                r.probed_calls,
                r.traps_per_s,
                r.off_phases
            );
        }
    }
    if let Some(rows) = &v.network {
        s += "- network (`drive tcp` over loopback with the network probes / with the lifecycle probes alone, rounds interleaved):

  | bytes | send size | sends | elapsed ratio of medians (median of ratios; off/off) | CPU ratio of medians (median of ratios; off/off) | retransmissions |
  |---|---|---|---|---|---|
";
        for r in rows {
            s += &format!(
                "  | {} | {} | {} | {} ({}; {}) | {} ({}; {}) | {} |\n",
                r.bytes,
                r.chunk,
                r.sends_counted,
                f(r.elapsed_s.ratio_of_medians),
                f(r.elapsed_s.median_of_ratios),
                f(r.elapsed_s_off_off.median_of_ratios),
                f(r.cpu_s.ratio_of_medians),
                f(r.cpu_s.median_of_ratios),
                f(r.cpu_s_off_off.median_of_ratios),
                r.retransmits
            );
        }
    }
    if let Some(rows) = &v.run_exit {
        s += "- run: traced command's exit to the report / to the tracer's exit:\n";
        for r in rows {
            s += &format!(
                "  - {} ms / {} ms\n",
                f(r.exit_to_report_ms),
                f(r.exit_to_tracer_exit_ms)
            );
        }
    }
    s
}
