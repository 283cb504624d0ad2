//! `gdrtrace validate`: run every workload this machine supports under the
//! tracer and hold the tracer to the workloads' own counts.
mod checks;
mod workloads;

use std::path::PathBuf;

use serde::Deserialize as _;

pub use self::checks::{
    Check, cuda_copy_checks, direct_paths_checks, nccl_checks, nixl_checks, nodes_checks, pin_churn_checks, ucx_checks,
    ucx_registration_checks, verbs_checks,
};
use self::checks::{check, collective_staged_bytes};
use self::workloads::{gpu, nixl, traced, ucx, verbs};
use super::run::Outputs;
use crate::{
    cli::{Format, TraceArgs, ValidateArgs},
    drive::{cuda_copy::CudaCopyReport, nccl::NcclReport, pin_churn::PinChurnSummary, verbs::VerbsReport},
    error::{Error, Result},
    probes::{Family, Status},
    report::Report,
};

/// The trace arguments of a secondary workload: no `--json` (the first
/// workload's report is the command's), and its own recording and transfer
/// records (`FILE.<workload>`; `X.<workload>.gz` for a recording `X.gz`,
/// gzip as well) when `--record FILE` / `--transfers FILE` were given.
fn sub(trace: &TraceArgs, name: &str) -> TraceArgs {
    let suffixed = |p: &PathBuf| {
        let mut s = p.clone().into_os_string();
        s.push(format!(".{name}"));
        PathBuf::from(s)
    };
    let recording = |p: &PathBuf| {
        if crate::recording::gzipped(p) {
            suffixed(&p.with_extension("")).with_added_extension("gz")
        } else {
            suffixed(p)
        }
    };
    TraceArgs {
        json: None,
        record: trace.record.as_ref().map(recording),
        transfers: trace.transfers.as_ref().map(suffixed),
        trace_event: trace.trace_event.as_ref().map(suffixed),
        ..trace.clone()
    }
}

/// A failed check per output file that could not be written.
fn written(errors: impl IntoIterator<Item = Error>) -> Vec<Check> {
    errors
        .into_iter()
        .map(|e| check("output files written", false, crate::error::describe(&e)))
        .collect()
}

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("gdrtrace-{}-{name}", std::process::id()))
}

fn print_checks(checks: &[Check]) {
    for c in checks {
        outln!("  {} {:<48} {}", if c.ok { "ok  " } else { "FAIL" }, c.name, c.detail);
    }
}

/// RDMA devices present (`/sys/class/infiniband`).
pub fn rdma_devices() -> Vec<String> {
    std::fs::read_dir("/sys/class/infiniband")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

pub fn validate(args: &ValidateArgs) -> Result<i32> {
    let v = run_validate(args)?;
    if args.trace.format == Format::Json {
        crate::output::print_json("the validation", &v.document())?;
    }
    Ok(v.code)
}

pub const SCHEMA: &str = "gdrtrace.validate/v1";

/// What a validate run found.
pub struct Validated {
    /// The exit status (0 passed, 1 a check failed, 3 kernel probes required and missing).
    pub code: i32,
    pub reports: Vec<(String, Report)>,
    pub checks: Vec<Check>,
    /// Kernel probe families whose functions exist here but could not be attached.
    pub unavailable: Vec<&'static str>,
    /// Kernel probe families whose functions this kernel does not have.
    pub absent: Vec<&'static str>,
}

/// `validate --format json` (`gdrtrace.validate/v1`, docs/formats.md).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ValidateDoc {
    pub schema: String,
    pub exit_code: i32,
    pub passed: usize,
    pub failed: usize,
    pub checks: Vec<Check>,
    pub kernel_families_unavailable: Vec<String>,
    pub kernel_families_absent: Vec<String>,
    /// Each workload's report (`gdrtrace.report/v1`), in the order they ran.
    pub workloads: Vec<WorkloadReport>,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct WorkloadReport {
    pub workload: String,
    pub report: Report,
}

impl Validated {
    pub fn document(&self) -> ValidateDoc {
        let failed = self.checks.iter().filter(|c| !c.ok).count();
        ValidateDoc {
            schema: SCHEMA.into(),
            exit_code: self.code,
            passed: self.checks.len() - failed,
            failed,
            checks: self.checks.clone(),
            kernel_families_unavailable: self.unavailable.iter().map(|f| f.to_string()).collect(),
            kernel_families_absent: self.absent.iter().map(|f| f.to_string()).collect(),
            workloads: self
                .reports
                .iter()
                .map(|(w, r)| WorkloadReport {
                    workload: w.clone(),
                    report: r.clone(),
                })
                .collect(),
        }
    }
}

/// Runs validate: its exit status, each workload's report and the checks.
/// With `--format json` its text goes to standard error (the workloads'
/// reports as text) and the caller prints one document.
pub fn run_validate(args: &ValidateArgs) -> Result<Validated> {
    let mut reports = Vec::new();
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
    // The checks hold the tracer's counts against the workloads' own: every
    // collective is counted unless the command line asks otherwise.
    let mut trace: TraceArgs = args.trace.clone();
    trace.collectives.get_or_insert(crate::sampling::Mode::Exact);
    if trace.format == Format::Json {
        crate::output::text_to_stderr();
        trace.format = Format::Text;
    }
    let trace = &trace;
    // Every file is checked before any BPF is loaded.
    let mut files = Outputs::open(trace, &[])?;
    let mut pin_churn = traced(trace, &argv, "pin-churn")?;
    // The recording's workloads line follows in `emit`.
    files.recording = pin_churn.recording.take();
    let timeline = pin_churn.timeline.take();
    let (report, code, errors) = pin_churn.finish();
    let text_summary =
        std::fs::read_to_string(&summary).map_err(|e| Error::io(format!("reading {}", summary.display()), e));
    let _ = std::fs::remove_file(&summary);
    let s: PinChurnSummary =
        serde_json::from_str(&text_summary?).map_err(|e| Error::Workload(format!("pin-churn summary: {e}")))?;
    let mut report = report;
    report
        .workloads
        .push(serde_json::json!({ "workload": "pin-churn", "summary": s }));
    let mut checks = vec![check(
        "pin-churn exited cleanly",
        code == 0,
        format!("exit status {code}"),
    )];
    checks.extend(pin_churn_checks(&report, &s));
    checks.extend(written(errors));
    checks.extend(written(super::run::emit(trace, files, &report, timeline).err()));
    outln!("\nvalidate: pin-churn ({})", s.line());
    print_checks(&checks);
    reports.push(("pin-churn".to_string(), report.clone()));
    if crate::topo::discover().gpus.is_empty() {
        outln!(
            "validate: cuda-copy, nccl, nccl across emulated nodes: skipping: no GPU (/proc/driver/nvidia/gpus is absent)"
        );
    } else {
        let gpu_checks = gpu(trace, &exe, &mut reports)?;
        checks.extend(gpu_checks);
    }
    if rdma_devices().is_empty() {
        outln!(
            "validate: verbs: skipping: no RDMA device (/sys/class/infiniband is empty; load rdma_rxe for Soft-RoCE)"
        );
    } else {
        let verbs_checks = verbs(trace, &exe, &mut reports)?;
        checks.extend(verbs_checks);
    }
    if args.no_ucx {
        outln!("validate: ucx: skipped (--no-ucx)");
    } else {
        let ucx_checks = ucx(trace, &exe, &mut reports)?;
        checks.extend(ucx_checks);
        if !crate::topo::discover().gpus.is_empty() {
            let nixl_checks = nixl(trace, &exe, &mut reports)?;
            checks.extend(nixl_checks);
        }
    }
    // Every report's verdicts against its own byte accounting.
    let path_checks: Vec<Check> = reports
        .iter()
        .flat_map(|(name, r)| direct_paths_checks(name, r))
        .collect();
    if !path_checks.is_empty() {
        outln!("\nvalidate: paths");
        print_checks(&path_checks);
    }
    checks.extend(path_checks);
    // A family is missing when its functions exist in this kernel but none
    // could be attached; functions absent from the kernel (peer memory
    // without the nvidia module) are reported, not required.
    let absent = |c: &crate::probes::Coverage| {
        c.reason
            .as_deref()
            .is_some_and(|r| r.starts_with("not in /proc/kallsyms"))
    };
    let missing_kernel: Vec<&str> = [Family::Pinning, Family::Verbs, Family::PeerMem, Family::DmaBuf]
        .into_iter()
        .filter(|f| {
            let rows: Vec<_> = report.coverage.iter().filter(|c| c.family == *f).collect();
            !rows.iter().any(|c| c.status == Status::Attached) && !rows.iter().all(|c| absent(c))
        })
        .map(|f| f.name())
        .collect();
    let not_in_kernel: Vec<&str> = [Family::Pinning, Family::Verbs, Family::PeerMem, Family::DmaBuf]
        .into_iter()
        .filter(|f| report.coverage.iter().filter(|c| c.family == *f).all(absent))
        .map(|f| f.name())
        .collect();
    let failed = checks.iter().filter(|c| !c.ok).count();
    outln!("validate: {} checks passed, {} failed", checks.len() - failed, failed);
    if !missing_kernel.is_empty() {
        outln!(
            "validate: kernel probe families unavailable here: {} (see Signals; each point with -v)",
            missing_kernel.join(", ")
        );
    }
    if !not_in_kernel.is_empty() {
        outln!(
            "validate: kernel probe families whose functions this kernel does not have (module not loaded?): {}",
            not_in_kernel.join(", ")
        );
    }
    let code = if failed > 0 {
        1
    } else if args.require_kernel_probes && !missing_kernel.is_empty() {
        errln!(
            "gdrtrace: kernel probe families unavailable: {}",
            missing_kernel.join(", ")
        );
        3
    } else {
        0
    };
    Ok(Validated {
        code,
        reports,
        checks,
        unavailable: missing_kernel,
        absent: not_in_kernel,
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    fn trace(args: &[&str]) -> TraceArgs {
        let argv = ["gdrtrace", "validate"].iter().chain(args);
        match crate::cli::Cli::try_parse_from(argv).expect("valid arguments").command {
            crate::cli::Command::Validate(v) => v.trace,
            other => panic!("not validate: {other:?}"),
        }
    }

    /// A later workload's files are named after the first one's; a gzip
    /// recording's name keeps `.gz` last, so it says what it holds.
    #[test]
    fn later_workloads_files_keep_a_gz_name_last() {
        let t = trace(&["--record", "run/job.rec.gz", "--transfers", "run/t.jsonl"]);
        let s = sub(&t, "cuda-copy");
        assert_eq!(s.record, Some(PathBuf::from("run/job.rec.cuda-copy.gz")));
        assert_eq!(s.transfers, Some(PathBuf::from("run/t.jsonl.cuda-copy")));
        let plain = sub(&trace(&["--record", "job.rec"]), "nccl-auto");
        assert_eq!(plain.record, Some(PathBuf::from("job.rec.nccl-auto")));
    }
}
