//! `gdrtrace validate`: run every workload this machine supports under the
//! tracer and hold the tracer to the workloads' own counts.
use std::path::PathBuf;

use crate::{
    cli::{TraceArgs, ValidateArgs},
    drive::pin_churn::PinChurnSummary,
    error::{Error, Result},
    probes::{Family, Status},
    report::{Report, text},
};

/// One check: what was compared, and whether it held.
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

fn check(name: &str, ok: bool, detail: String) -> Check {
    Check {
        name: name.to_string(),
        ok,
        detail,
    }
}

fn calls(r: &Report, pid: u32, label: &str) -> u64 {
    r.processes
        .iter()
        .find(|p| p.pid == pid)
        .and_then(|p| p.calls.get(label))
        .copied()
        .unwrap_or(0)
}

/// Checks of the pin-churn run against its own summary.
pub fn pin_churn_checks(r: &Report, s: &PinChurnSummary) -> Vec<Check> {
    let reg = calls(r, s.pid, "io_uring_register:register-buffers");
    let unreg = calls(r, s.pid, "io_uring_register:unregister-buffers");
    let hist = r
        .operations
        .iter()
        .find(|o| o.name == "io_uring_register:register-buffers");
    let mut out = vec![
        check(
            "registrations counted",
            reg == s.registrations,
            format!("tracer {reg}, workload {}", s.registrations),
        ),
        check(
            "unregistrations counted",
            unreg == s.unregistrations,
            format!("tracer {unreg}, workload {}", s.unregistrations),
        ),
        check(
            "registration latency histogram",
            hist.is_some_and(|h| h.latency.count == s.registrations && !h.latency.buckets.is_empty()),
            hist.map_or("missing".into(), |h| {
                format!(
                    "{} samples, p50 {} ns, p99 {} ns",
                    h.latency.count, h.latency.p50, h.latency.p99
                )
            }),
        ),
        check(
            "no events lost",
            r.loss.complete,
            format!("ring buffer drops {}", r.loss.ringbuf_drops),
        ),
    ];
    match &r.pin_counters.delta {
        Some(d) => out.push(check(
            "nr_foll_pin delta covers the registered pages",
            d.acquired >= s.pages_registered && d.released >= s.pages_registered,
            format!(
                "acquired +{}, released +{}, workload registered {} pages (+{} O_DIRECT pages)",
                d.acquired, d.released, s.pages_registered, s.odirect_pages
            ),
        )),
        None => out.push(check(
            "nr_foll_pin delta covers the registered pages",
            true,
            "skipping: /proc/vmstat has no nr_foll_pin counters".into(),
        )),
    }
    out
}

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("gdrtrace-{}-{name}", std::process::id()))
}

pub fn validate(args: &ValidateArgs) -> Result<i32> {
    let exe = std::env::current_exe().map_err(|e| Error::io("locating the gdrtrace binary", e))?;
    let summary = temp_path("pin-churn.json");
    let argv = vec![
        exe.display().to_string(),
        "drive".into(),
        "pin-churn".into(),
        "--iterations".into(),
        args.iterations.to_string(),
        "--summary".into(),
        summary.display().to_string(),
    ];
    let trace: &TraceArgs = &args.trace;
    let out = super::run::trace_command(trace, &argv)?;
    let text_summary =
        std::fs::read_to_string(&summary).map_err(|e| Error::io(format!("reading {}", summary.display()), e));
    let _ = std::fs::remove_file(&summary);
    let s: PinChurnSummary =
        serde_json::from_str(&text_summary?).map_err(|e| Error::Workload(format!("pin-churn summary: {e}")))?;
    let mut report = out.report;
    report
        .workloads
        .push(serde_json::json!({ "workload": "pin-churn", "summary": s }));
    let mut checks = vec![check(
        "pin-churn exited cleanly",
        out.exit_code == 0,
        format!("exit status {}", out.exit_code),
    )];
    checks.extend(pin_churn_checks(&report, &s));
    super::run::emit(trace, &report)?;
    if trace.format == crate::cli::Format::Text {
        let _ = text::render; // rendered by emit
    }
    println!("\nvalidate: pin-churn ({})", s.line());
    for c in &checks {
        println!("  {} {:<48} {}", if c.ok { "ok  " } else { "FAIL" }, c.name, c.detail);
    }
    let missing_kernel: Vec<&str> = [Family::Pinning, Family::Verbs, Family::PeerMem, Family::DmaBuf]
        .into_iter()
        .filter(|f| {
            !report
                .coverage
                .iter()
                .any(|c| c.family == *f && c.status == Status::Attached)
        })
        .map(|f| f.name())
        .collect();
    let failed = checks.iter().filter(|c| !c.ok).count();
    println!("validate: {} checks passed, {} failed", checks.len() - failed, failed);
    if !missing_kernel.is_empty() {
        println!(
            "validate: kernel probe families unavailable here: {} (see the coverage table)",
            missing_kernel.join(", ")
        );
    }
    if failed > 0 {
        return Ok(1);
    }
    if args.require_kernel_probes && !missing_kernel.is_empty() {
        eprintln!(
            "gdrtrace: kernel probe families unavailable: {}",
            missing_kernel.join(", ")
        );
        return Ok(3);
    }
    Ok(0)
}
