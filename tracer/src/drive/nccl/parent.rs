//! The parent (launcher) of `drive nccl`: creates the NCCL unique id,
//! starts one rank process per GPU with the mode's environment, waits for
//! them (stopping the others when one fails) and combines their results.
use std::{
    path::Path,
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use super::{ffi::Nccl, *};
use crate::drive::cuda_copy::cu::{self, CuError};

/// The parent: spawns one rank per GPU and combines their results.
pub fn run(opts: &NcclOpts) -> Result<NcclReport, NcclError> {
    let started = Instant::now();
    validate(opts)?;
    cu::init()?;
    let ndev = cu::device_count()?;
    if ndev == 0 {
        return Err(CuError::NoDevice.into());
    }
    let placement = Placement::new(opts.nranks, opts.hosts, ndev)?;
    let nranks = placement.nranks;
    let lib = Nccl::load()?;
    let nccl_version = lib.version()?;
    // The bootstrap root now runs in this process until it exits.
    let id = lib.unique_id()?;
    let hex = id_to_hex(&id.internal);

    let dir = std::env::temp_dir().join(format!(
        "gdrtrace-nccl-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    std::fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
    let outcome = spawn_and_wait(opts, &placement, &hex, &dir);
    let result = outcome.and_then(|outcomes| combine(opts, nranks, outcomes, &lib, nccl_version, started));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

pub(super) fn rank_args(opts: &NcclOpts, rank: usize, nranks: usize, hex: &str, result: &Path) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "drive".into(),
        "nccl".into(),
        "--rank".into(),
        rank.to_string(),
        "--nranks".into(),
        nranks.to_string(),
        "--id".into(),
        hex.into(),
        "--result".into(),
        result.display().to_string(),
        "--op".into(),
        opts.op.name().into(),
        "--mode".into(),
        opts.mode.name().into(),
        "--warmup".into(),
        opts.warmup.to_string(),
        "--hosts".into(),
        opts.hosts.to_string(),
    ];
    match opts.size {
        Some(s) => a.extend(["--size".into(), s.to_string()]),
        None => a.extend(["--sizes".into(), opts.sizes.to_string()]),
    }
    if let Some(i) = opts.iters {
        a.extend(["--iters".into(), i.to_string()]);
    }
    if let Some(d) = opts.duration {
        a.extend(["--duration".into(), format!("{}", d.as_secs_f64())]);
    }
    a
}

fn status_text(st: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "ended abnormally".into(),
    }
}

fn read_outcome(path: &Path) -> Option<RankOutcome> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

fn stop_all(children: &mut [(usize, Child)], done: &[bool]) {
    for (r, c) in children.iter_mut() {
        if !done[*r] {
            // Only processes this run started, by their own handle.
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn_and_wait(
    opts: &NcclOpts,
    placement: &Placement,
    hex: &str,
    dir: &Path,
) -> Result<Vec<RankOutcome>, NcclError> {
    let nranks = placement.nranks;
    let exe = std::env::current_exe().map_err(io_err("locating the gdrtrace executable"))?;
    let mut children: Vec<(usize, Child)> = Vec::with_capacity(nranks);
    let mut done = vec![false; nranks];
    for rank in 0..nranks {
        let result = dir.join(format!("rank{rank}.json"));
        let mut cmd = Command::new(&exe);
        cmd.args(rank_args(opts, rank, nranks, hex, &result))
            .stdin(Stdio::null())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit());
        for (k, v) in opts.mode.env() {
            cmd.env(k, v);
        }
        if let (Some(host), _) = placement.of(rank) {
            cmd.env("NCCL_HOSTID", host);
        }
        match cmd.spawn() {
            Ok(c) => children.push((rank, c)),
            Err(e) => {
                stop_all(&mut children, &done);
                return Err(io_err(format!("starting rank {rank} ({})", exe.display()))(e));
            }
        }
    }
    let timeout = opts.timeout.unwrap_or_else(|| match opts.duration {
        Some(d) => d + Duration::from_secs(300),
        None => Duration::from_secs(600),
    });
    let deadline = Instant::now() + timeout;
    let mut failure: Option<(usize, ExitStatus)> = None;
    loop {
        for (r, c) in children.iter_mut() {
            if done[*r] {
                continue;
            }
            match c.try_wait() {
                Ok(Some(st)) => {
                    done[*r] = true;
                    if !st.success() && failure.is_none() {
                        failure = Some((*r, st));
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    let r = *r;
                    stop_all(&mut children, &done);
                    return Err(io_err(format!("waiting for rank {r}"))(e));
                }
            }
        }
        if let Some((rank, st)) = failure {
            stop_all(&mut children, &done);
            let msg = read_outcome(&dir.join(format!("rank{rank}.json")))
                .and_then(|o| o.error)
                .unwrap_or_else(|| status_text(&st));
            return Err(NcclError::Rank { rank, msg });
        }
        if done.iter().all(|d| *d) {
            break;
        }
        if Instant::now() >= deadline {
            stop_all(&mut children, &done);
            return Err(NcclError::Timeout {
                secs: timeout.as_secs_f64(),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut outcomes = Vec::with_capacity(nranks);
    for rank in 0..nranks {
        let o = read_outcome(&dir.join(format!("rank{rank}.json"))).ok_or_else(|| NcclError::Rank {
            rank,
            msg: "exited 0 but left no result".into(),
        })?;
        if let Some(msg) = o.error {
            return Err(NcclError::Rank { rank, msg });
        }
        outcomes.push(o);
    }
    Ok(outcomes)
}

fn combine(
    opts: &NcclOpts,
    nranks: usize,
    outcomes: Vec<RankOutcome>,
    lib: &Nccl,
    nccl_version: String,
    started: Instant,
) -> Result<NcclReport, NcclError> {
    let reports: Vec<RankReport> = outcomes.into_iter().filter_map(|o| o.report).collect();
    let Some(first) = reports.first() else {
        return Err(NcclError::Usage("no rank reported".into()));
    };
    if let Some(r) = reports.iter().find(|r| r.calls != first.calls) {
        return Err(NcclError::Rank {
            rank: r.rank,
            msg: format!(
                "made {} collective calls, rank {} made {}",
                r.calls, first.rank, first.calls
            ),
        });
    }
    let factor = bus_factor(opts.op, nranks);
    let mut sizes = Vec::new();
    for (i, s0) in first.sizes.iter().enumerate() {
        let per: Vec<&RankSize> = reports.iter().filter_map(|r| r.sizes.get(i)).collect();
        let n = per.len().max(1) as f64;
        let time_us = per.iter().map(|s| s.time_us).sum::<f64>() / n;
        let max_rank_time_us = per.iter().map(|s| s.time_us).fold(0.0, f64::max);
        let algbw = if time_us > 0.0 {
            s0.size as f64 / (time_us * 1e-6) / 1e9
        } else {
            0.0
        };
        let cpu_s: f64 = per.iter().map(|s| s.cpu_s).sum();
        let calls: f64 = per.iter().map(|s| s.iters as f64).sum();
        sizes.push(SizeResult {
            size: s0.size,
            count: s0.count,
            iters: s0.iters,
            time_us,
            max_rank_time_us,
            algbw,
            busbw: algbw * factor,
            cpu_us_per_call: if calls > 0.0 { cpu_s * 1e6 / calls } else { 0.0 },
            cpu_s,
        });
    }
    Ok(NcclReport {
        ranks: nranks,
        hosts: opts.hosts,
        mode: opts.mode,
        op: opts.op,
        env: opts
            .mode
            .env()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        calls: first.calls,
        calls_by_function: first.calls_by_function.clone(),
        control_calls: first.control_calls,
        duration_s: opts.duration.map(|d| d.as_secs_f64()),
        duration_iters: first.duration_iters,
        sizes,
        verified: reports.iter().all(|r| r.verified),
        nccl_version,
        nccl_library: lib.path.clone(),
        parent_pid: std::process::id(),
        rank_reports: reports,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}
