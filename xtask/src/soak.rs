//! `cargo xtask bench --only soak`: `gdrtrace serve` under a steady stream
//! of short-lived traced processes (1,000 a minute by default) for a fixed
//! time, its resident memory and CPU sampled every 10 s. Memory must stay
//! flat: every process is forgotten `--exited-retention` after it exits.
//!
//! The processes are started by this task, which no agent traces, so each
//! is found by the kernel when its loader opens libibverbs: nine in ten are
//! tests/standin/serve_child (one traced UDP send, an in-kernel aggregation
//! row), one in ten `gdrtrace drive pin-churn` (io_uring registrations:
//! events, registry and histogram state). Nothing is asserted; the figures
//! go to target/bench/soak.json and docs/perf.md.
use std::{
    io::{Read as _, Write as _},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

use crate::util;

const SAMPLE: Duration = Duration::from_secs(10);
const RETENTION_S: u64 = 10;

fn get_metrics(addr: &str) -> Result<String> {
    let mut s = std::net::TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (_, body) = raw.split_once("\r\n\r\n").context("no HTTP body")?;
    Ok(body.to_string())
}

/// The sum of a metric's samples (all label sets).
fn sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            (rest.starts_with('{') || rest.starts_with(' ')).then(|| rest.rsplit(' ').next()?.parse::<f64>().ok())?
        })
        .sum::<f64>()
        + 0.0 // an empty sum of f64 is -0.0
}

/// A `/proc/PID/status` field in bytes.
fn status_bytes(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kib| kib * 1024)
}

/// Heap and other private memory of a process (`RssAnon`): its resident
/// set less the mapped files and the BPF maps, whose pages are resident
/// once touched (the 8 MiB ring buffer fills in as records wrap around it).
fn anon_bytes(pid: u32) -> Option<u64> {
    status_bytes(
        &std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?,
        "RssAnon:",
    )
}

/// (RSS bytes, CPU seconds) of a process.
fn usage(pid: u32) -> Option<(u64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status_bytes(&status, "VmRSS:")? / 1024;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((rss * 1024, ticks / hz.max(1.0)))
}

/// Least-squares slope of (x, y).
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if n < 2.0 {
        return f64::NAN;
    }
    let (mx, my) = (
        points.iter().map(|p| p.0).sum::<f64>() / n,
        points.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let cov: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let var: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    cov / var
}

/// One 10 s sample of the agent (`soak.json`'s `samples`).
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    t_s: f64,
    rss_mib: f64,
    rss_anon_mib: Option<f64>,
    cpu_pct: f64,
    tracked: f64,
    discovered: f64,
    forgotten: f64,
    aggregate_rows: Option<f64>,
    lost: f64,
    shed: f64,
    shed_targets: f64,
    shed_rescans: f64,
    shed_samples: f64,
    shed_level: f64,
}

/// `target/bench/soak.json`.
#[derive(Debug, Serialize)]
pub struct Soak {
    minutes: f64,
    per_minute: u32,
    spawned: u64,
    spawn_failures: u64,
    agent_exit: String,
    agent_start_s: f64,
    rss_start_mib: f64,
    rss_max_mib: f64,
    rss_half_mib: Option<f64>,
    rss_end_mib: Option<f64>,
    rss_slope_mib_per_hour_second_half: f64,
    anon_half_mib: Option<f64>,
    anon_end_mib: Option<f64>,
    anon_max_mib: f64,
    anon_slope_mib_per_hour_second_half: f64,
    cpu_pct_mean: f64,
    cpu_pct_max: f64,
    #[serde(rename = "final")]
    last: Option<Sample>,
    samples: Vec<Sample>,
}

pub fn soak(bin: &std::path::Path, minutes: f64, per_minute: u32) -> Result<Soak> {
    let root = util::repo_root()?;
    let dir = util::target_dir()?.join("bench");
    std::fs::create_dir_all(&dir)?;
    let child_bin = dir.join("serve_child");
    util::run_status(
        Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args(["-O2", "-o"])
            .arg(&child_bin)
            .arg(root.join("tests/standin/serve_child.c"))
            .arg("-libverbs"),
    )?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let addr = format!("127.0.0.1:{port}");
    let mut agent = Command::new(bin)
        .args(["serve", "--listen", &addr, "--no-installed-libraries"])
        .arg(format!("--exited-retention={RETENTION_S}s"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {} serve", bin.display()))?;
    let lines = util::timed_lines(agent.stderr.take().context("agent stderr")?);
    let started = Instant::now();
    loop {
        match lines.recv_timeout(Duration::from_secs(120)) {
            Ok((_, l)) if l.contains("serving metrics") => break,
            Ok(_) => {}
            Err(_) => {
                let _ = agent.kill();
                bail!("the agent did not start within 2 minutes");
            }
        }
    }
    let start_s = started.elapsed().as_secs_f64();
    let apid = agent.id();
    let run_for = Duration::from_secs_f64(minutes * 60.0);
    let every = Duration::from_secs_f64(60.0 / per_minute.max(1) as f64);
    eprintln!(
        "xtask bench: soak: {per_minute} processes a minute for {minutes} min against {} serve",
        bin.display()
    );
    let mut children: Vec<Child> = Vec::new();
    let (mut spawned, mut failed) = (0u64, 0u64);
    let mut samples = Vec::new();
    let t0 = Instant::now();
    let (rss0, cpu0) = usage(apid).context("reading the agent's usage")?;
    let mut last = (t0, cpu0);
    let mut next_sample = t0;
    let mut next_spawn = t0;
    let sample = |now: Instant, samples: &mut Vec<Sample>, last: &mut (Instant, f64)| -> Result<()> {
        let (rss, cpu) = usage(apid).context("the agent exited")?;
        let m = get_metrics(&addr)?;
        let dt = now.duration_since(last.0).as_secs_f64().max(1e-9);
        let cpu_pct = (cpu - last.1) / dt * 100.0;
        *last = (now, cpu);
        let shed_by = |what: &str| -> f64 {
            m.lines()
                .filter(|l| l.starts_with("gdrtrace_shed_total{") && l.contains(&format!("what=\"{what}\"")))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>()
                + 0.0
        };
        samples.push(Sample {
            t_s: now.duration_since(t0).as_secs_f64().round(),
            rss_mib: rss as f64 / 1048576.0,
            rss_anon_mib: anon_bytes(apid).map(|b| b as f64 / 1048576.0),
            cpu_pct,
            tracked: sum(&m, "gdrtrace_tracked_processes"),
            discovered: sum(&m, "gdrtrace_targets_discovered_total"),
            forgotten: sum(&m, "gdrtrace_targets_forgotten_total"),
            aggregate_rows: m
                .lines()
                .find(|l| l.contains("bpf_map_entries") && l.contains("AGGREGATE"))
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok()),
            lost: sum(&m, "gdrtrace_events_lost_total"),
            shed: sum(&m, "gdrtrace_shed_total"),
            shed_targets: shed_by("target"),
            shed_rescans: shed_by("library-rescan"),
            shed_samples: shed_by("process-sample"),
            shed_level: sum(&m, "gdrtrace_agent_shed_level"),
        });
        Ok(())
    };
    while t0.elapsed() < run_for {
        let now = Instant::now();
        if now >= next_spawn {
            next_spawn += every;
            let mut cmd = if spawned % 10 == 9 {
                let mut c = Command::new(bin);
                c.args(["drive", "pin-churn", "--iterations", "20", "--odirect-mib", "0"]);
                c
            } else {
                Command::new(&child_bin)
            };
            match cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn() {
                Ok(c) => {
                    children.push(c);
                    spawned += 1;
                }
                Err(_) => failed += 1,
            }
        }
        children.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
        if now >= next_sample {
            next_sample += SAMPLE;
            sample(now, &mut samples, &mut last)?;
        }
        thread::sleep(next_spawn.min(next_sample).saturating_duration_since(Instant::now()));
    }
    for mut c in children {
        let _ = c.wait();
    }
    // Past the retention: everything exited must be forgotten by now.
    thread::sleep(Duration::from_secs(RETENTION_S + 10));
    sample(Instant::now(), &mut samples, &mut last)?;
    // SAFETY: signalling the agent this task started.
    unsafe { libc::kill(apid as i32, libc::SIGTERM) };
    let status = agent.wait()?;
    let series = |value: fn(&Sample) -> Option<f64>| -> Vec<(f64, f64)> {
        samples.iter().filter_map(|s| Some((s.t_s, value(s)?))).collect()
    };
    let (rss, anon) = (series(|s| Some(s.rss_mib)), series(|s| s.rss_anon_mib));
    // Resident memory is a high-water mark: what matters is whether it
    // still grows once the run is under way, so the second half is compared
    // with its start (and a least-squares slope over it is given too).
    let half = run_for.as_secs_f64() / 2.0;
    let second = |v: &[(f64, f64)]| -> (Option<f64>, Option<f64>, f64) {
        let tail: Vec<(f64, f64)> = v.iter().copied().filter(|p| p.0 >= half).collect();
        (
            tail.first().map(|p| p.1),
            tail.last().map(|p| p.1),
            slope(&tail) * 3600.0,
        )
    };
    let (rss_half, rss_end, rss_slope) = second(&rss);
    let (anon_half, anon_end, anon_slope) = second(&anon);
    // JSON has no NaN: serde_json writes a non-finite figure as null.
    let cpu: Vec<f64> = samples
        .iter()
        .skip(1)
        .map(|s| s.cpu_pct)
        .filter(|c| c.is_finite())
        .collect();
    Ok(Soak {
        minutes,
        per_minute,
        spawned,
        spawn_failures: failed,
        agent_exit: status.to_string(),
        agent_start_s: start_s,
        rss_start_mib: rss0 as f64 / 1048576.0,
        rss_max_mib: rss.iter().map(|p| p.1).fold(0.0, f64::max),
        rss_half_mib: rss_half,
        rss_end_mib: rss_end,
        rss_slope_mib_per_hour_second_half: rss_slope,
        anon_half_mib: anon_half,
        anon_end_mib: anon_end,
        anon_max_mib: anon.iter().map(|p| p.1).fold(0.0, f64::max),
        anon_slope_mib_per_hour_second_half: anon_slope,
        cpu_pct_mean: cpu.iter().sum::<f64>() / cpu.len().max(1) as f64,
        cpu_pct_max: cpu.iter().copied().fold(0.0, f64::max),
        last: samples.last().cloned(),
        samples,
    })
}

pub fn markdown(v: &Soak, date: &str, machine: &str) -> String {
    let f = |x: Option<f64>| x.filter(|x| x.is_finite()).map_or("-".into(), |x| format!("{x:.1}"));
    // As serde_json prints a number (`12.0`), or null.
    let n = |x: Option<f64>| x.filter(|x| x.is_finite()).map_or("null".into(), |x| format!("{x:?}"));
    let end = |field: fn(&Sample) -> Option<f64>| n(v.last.as_ref().and_then(field));
    format!(
        "Soak, {date} ({machine}): `gdrtrace serve` (release) under {} short-lived traced processes a minute for {} min ({} started):\n\n\
         - resident memory: {} MiB at start, {} MiB at half time, {} MiB at the end (max {}); slope over the second half {} MiB/h\n\
         - of which heap and private memory (RssAnon): {} MiB at half time, {} MiB at the end (max {}); slope over the second half {} MiB/h\n\
         - CPU: mean {}% of one CPU, max {}% (10 s samples)\n\
         - at the end: {} discovered, {} forgotten, {} tracked, {} kernel aggregation rows, {} events lost; shed: {} targets, {} library rescans, {} process samples\n",
        v.per_minute,
        n(Some(v.minutes)),
        v.spawned,
        f(Some(v.rss_start_mib)),
        f(v.rss_half_mib),
        f(v.rss_end_mib),
        f(Some(v.rss_max_mib)),
        f(Some(v.rss_slope_mib_per_hour_second_half)),
        f(v.anon_half_mib),
        f(v.anon_end_mib),
        f(Some(v.anon_max_mib)),
        f(Some(v.anon_slope_mib_per_hour_second_half)),
        f(Some(v.cpu_pct_mean)),
        f(Some(v.cpu_pct_max)),
        end(|s| Some(s.discovered)),
        end(|s| Some(s.forgotten)),
        end(|s| Some(s.tracked)),
        end(|s| s.aggregate_rows),
        end(|s| Some(s.lost)),
        end(|s| Some(s.shed_targets)),
        end(|s| Some(s.shed_rescans)),
        end(|s| Some(s.shed_samples)),
    )
}
