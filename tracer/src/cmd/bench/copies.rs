//! `bench copies`: copies summed in the kernel per address pair, against
//! the same copies evented one by one.
use super::*;

#[derive(Serialize)]
struct CopiesResult {
    collectives: String,
    copies_per_round: u64,
    bytes: u64,
    rounds: u32,
    /// Median over rounds of (traced loop - untraced loop) / copies.
    ns_per_copy: f64,
    ns_per_copy_min: f64,
    ns_per_copy_max: f64,
    untraced_ns_per_copy: f64,
    /// Per traced round: the report's copies (counted, or estimated where
    /// the duty cycle sampled them) over those made.
    reported_share_min: f64,
    reported_share_max: f64,
    /// Copy probe traps (entries and returns) per traced round, median.
    traps: u64,
    /// Every traced round's copies were host-staged with a pageable host
    /// side, as the report's verdicts say.
    verdict_host_staged_pageable: bool,
    off_phases: u64,
}

/// One round of `drive copy-loop`: untraced, or under `run` with its JSON
/// report read back. Returns the loop's summary and the report.
fn copy_round(
    a: &crate::cli::BenchCopiesArgs,
    traced: bool,
    dir: &std::path::Path,
) -> Result<(crate::drive::copy_loop::CopyLoopSummary, Option<crate::report::Report>)> {
    let exe = std::env::current_exe().map_err(|e| Error::io("locating this executable", e))?;
    let summary = dir.join(if traced { "traced.json" } else { "untraced.json" });
    let report = dir.join("report.json");
    let mut cmd = std::process::Command::new(&exe);
    if traced {
        cmd.args(["run", "--collectives", &a.collectives.to_string(), "--json"])
            .arg(&report)
            .arg("--")
            .arg(&exe);
    }
    cmd.args(["drive", "copy-loop", "--wait-ms", "1000"])
        .args(["--copies", &a.copies.to_string(), "--bytes", &a.bytes.to_string()])
        .args(["--burst", &a.burst.to_string(), "--pause-ms", &a.pause_ms.to_string()])
        .arg("--lib")
        .arg(&a.lib)
        .arg("--summary")
        .arg(&summary);
    let out = cmd.output().map_err(|e| Error::io("starting drive copy-loop", e))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(Error::Workload(format!(
            "the copy loop failed ({}): {}",
            out.status,
            err.lines().last().unwrap_or("")
        )));
    }
    let read =
        |p: &std::path::Path| std::fs::read_to_string(p).map_err(|e| Error::io(format!("reading {}", p.display()), e));
    let s: crate::drive::copy_loop::CopyLoopSummary =
        serde_json::from_str(&read(&summary)?).map_err(|e| Error::Workload(format!("the loop's summary: {e}")))?;
    let r = if traced {
        Some(serde_json::from_str(&read(&report)?).map_err(|e| Error::Workload(format!("the report: {e}")))?)
    } else {
        None
    };
    Ok((s, r))
}

/// The copy loop's copies in a report (counted or estimated), whether all
/// of them are host-staged with a pageable host side, and their traps.
pub fn copies_in_report(r: &crate::report::Report, pid: u32) -> (u64, bool, u64) {
    const OPS: [&str; 2] = ["cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync"];
    let mine = r.processes.iter().find(|p| p.pid == pid);
    let calls: u64 = mine.map_or(0, |p| {
        OPS.iter().map(|o| p.info.calls.get(*o).copied().unwrap_or(0)).sum()
    });
    let ops: Vec<_> = r.operations.iter().filter(|o| OPS.contains(&o.name.as_str())).collect();
    let staged = !ops.is_empty()
        && ops
            .iter()
            .all(|o| o.transport == "host-staged" && o.evidence.contains("pageable host memory"));
    let traps = r
        .probe_hits
        .iter()
        .filter(|h| OPS.contains(&h.op.as_str()))
        .map(|h| h.hits)
        .sum::<u64>()
        * 2;
    (calls, staged, traps)
}

pub(super) fn copies(a: &crate::cli::BenchCopiesArgs) -> Result<i32> {
    if a.copies == 0 || a.rounds == 0 {
        return Err(Error::Usage("--copies and --rounds must be at least 1".into()));
    }
    if !a.lib.is_file() {
        return Err(Error::Usage(format!(
            "--lib {}: no such file (the stand-in libcuda the tests build)",
            a.lib.display()
        )));
    }
    let dir = std::env::temp_dir().join(format!("gdrtrace-bench-copies-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let made = 2 * a.copies;
    let (mut per_copy, mut base, mut shares, mut traps) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut staged = true;
    let mut off_phases = 0;
    for round in 0..a.rounds {
        let order = if round % 2 == 0 { [false, true] } else { [true, false] };
        let mut loops = [0.0; 2];
        for traced in order {
            let (s, r) = copy_round(a, traced, &dir)?;
            loops[traced as usize] = s.loop_s;
            if let Some(r) = r {
                let (calls, ok, t) = copies_in_report(&r, s.pid);
                shares.push(calls as f64 / made as f64);
                staged &= ok;
                traps.push(t);
                off_phases = off_phases.max(r.sampling.map_or(0, |d| d.off_phases));
            }
        }
        per_copy.push((loops[1] - loops[0]) * 1e9 / made as f64);
        base.push(loops[0] * 1e9 / made as f64);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    traps.sort_unstable();
    let r = CopiesResult {
        collectives: a.collectives.to_string(),
        copies_per_round: made,
        bytes: a.bytes,
        rounds: a.rounds,
        ns_per_copy_min: per_copy.iter().copied().fold(f64::INFINITY, f64::min),
        ns_per_copy_max: per_copy.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ns_per_copy: median(&mut per_copy),
        untraced_ns_per_copy: median(&mut base),
        reported_share_min: shares.iter().copied().fold(f64::INFINITY, f64::min),
        reported_share_max: shares.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        traps: traps[traps.len() / 2],
        verdict_host_staged_pageable: staged,
        off_phases,
    };
    let line = format!(
        "bench copies ({}): {:.0} ns per copy under run ({:.0}-{:.0} over {} rounds of {} copies; {:.1} ns untraced); the report has {:.1}-{:.1}% of the copies; {} copy traps a round; verdict host-staged from pageable memory: {}",
        r.collectives,
        r.ns_per_copy,
        r.ns_per_copy_min,
        r.ns_per_copy_max,
        r.rounds,
        made,
        r.untraced_ns_per_copy,
        r.reported_share_min * 100.0,
        r.reported_share_max * 100.0,
        r.traps,
        if r.verdict_host_staged_pageable { "yes" } else { "NO" },
    );
    print(&r, line)
}
