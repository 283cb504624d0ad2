//! `gdrtrace baseline record`: validate's reports (or one saved report)
//! stored with the profile of the machine they were made on.
use crate::{
    cli::{BaselineRecordArgs, Format},
    compare::{self, Run},
    error::{Error, Result},
    input,
    output::{self, Named, OutputFile},
};

pub const SCHEMA: &str = "gdrtrace.baseline-record/v1";

/// `baseline record --format json` (`gdrtrace.baseline-record/v1`,
/// docs/formats.md): what was written where, and the profile.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RecordDoc {
    pub schema: String,
    /// The baseline file written.
    pub out: String,
    /// `validate` or `report NAME`.
    pub source: String,
    pub workloads: Vec<String>,
    /// Runs of each workload kept (`--repeat`; 1 with --from).
    #[serde(default = "one")]
    pub runs_per_workload: usize,
    pub profile: compare::Profile,
    /// The exit status of the validate run behind it (0 with --from).
    pub validate_exit_code: i32,
}

fn one() -> usize {
    1
}

pub fn record(args: &BaselineRecordArgs) -> Result<i32> {
    let mut paths = vec![
        Named::input("--from", args.from.as_deref()),
        Named::output("--out", Some(&args.out)),
    ];
    if args.from.is_none() {
        // validate's own outputs too (--json, --record, --transfers).
        let t = &args.validate.trace;
        paths.extend([
            Named::input("--nccl-log", t.nccl_log.as_deref()),
            Named::input("--ucx-log", t.ucx_log.as_deref()),
            Named::output("--json", t.json.as_deref()),
            Named::output("--record", t.record.as_deref()),
            Named::output("--transfers", t.transfers.as_deref()),
        ]);
    }
    output::check_distinct(&paths)?;
    // Without --from, validate runs first: --out is opened before it.
    let mut out = match &args.from {
        Some(_) => None,
        None => Some(OutputFile::open("--out", &args.out)?),
    };
    let (runs, reports, source, code) = match &args.from {
        Some(path) => {
            let v = input::read_json(path)?;
            let report = compare::read_report(&v)
                .map_err(|e| Error::Input(format!("{} is not a usable report: {e}", path.display())))?;
            let name = path
                .file_name()
                .map_or_else(|| path.display().to_string(), |f| f.to_string_lossy().into_owned());
            // The report is kept as written.
            let run = Run {
                workload: compare::workload_name(&report),
                report: v,
                repeats: Vec::new(),
            };
            (vec![run], vec![report], format!("report {name}"), 0)
        }
        None => {
            let n = args.repeat.max(1);
            let mut runs: Vec<Run> = Vec::new();
            let mut reports = Vec::new();
            let mut code = 0;
            for k in 0..n {
                let what = if n > 1 {
                    format!("baseline record: validate (run {} of {n})", k + 1)
                } else {
                    "baseline record: validate".to_string()
                };
                let v = crate::progress::step(&what, || super::validate::run_validate(&args.validate))?;
                if code == 0 {
                    code = v.code;
                }
                for (workload, r) in v.reports {
                    let report = serde_json::to_value(&r)
                        .map_err(|e| Error::Workload(format!("serializing the {workload} report: {e}")))?;
                    match runs.iter_mut().find(|x| x.workload == workload) {
                        Some(run) if k > 0 => run.repeats.push(report),
                        Some(_) => {
                            return Err(Error::Workload(format!("validate ran workload {workload} twice")));
                        }
                        None if k == 0 => {
                            runs.push(Run {
                                workload,
                                report,
                                repeats: Vec::new(),
                            });
                            reports.push(r);
                        }
                        None => errln!(
                            "gdrtrace: note: workload {workload} ran in run {} of validate and not in the first: left out",
                            k + 1
                        ),
                    }
                }
            }
            (runs, reports, "validate".to_string(), code)
        }
    };
    let (baseline, note) = compare::record(runs, &reports, source);
    if let Some(n) = note {
        errln!("gdrtrace: note: {n}");
    }
    let json = serde_json::to_string_pretty(&baseline)
        .map_err(|e| Error::Workload(format!("serializing the baseline: {e}")))?;
    let out = match out.take() {
        Some(f) => f,
        None => OutputFile::open("--out", &args.out)?,
    };
    out.write(json.as_bytes())?;
    let p = &baseline.profile;
    let runs_each = baseline.runs.iter().map(|r| 1 + r.repeats.len()).max().unwrap_or(1);
    if args.validate.trace.format == Format::Json {
        let doc = RecordDoc {
            schema: SCHEMA.into(),
            out: args.out.display().to_string(),
            source: baseline.source.clone(),
            workloads: baseline.runs.iter().map(|r| r.workload.clone()).collect(),
            runs_per_workload: runs_each,
            profile: p.clone(),
            validate_exit_code: code,
        };
        crate::output::print_json("the baseline summary", &doc)?;
        return Ok(code);
    }
    outln!(
        "baseline: {} run(s) ({}){} written to {}; kernel {}, lockdown {}, gpu {}, nic {}, probe catalog {}",
        baseline.runs.len(),
        baseline
            .runs
            .iter()
            .map(|r| r.workload.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        if runs_each > 1 {
            format!(", each run {runs_each} times,")
        } else {
            String::new()
        },
        args.out.display(),
        p.kernel,
        p.lockdown,
        p.gpu.as_deref().unwrap_or("none/unknown"),
        p.nic.as_deref().unwrap_or("none/unknown"),
        p.probe_catalog
    );
    if code != 0 {
        errln!("gdrtrace: note: the validate run behind this baseline exited {code}");
    }
    Ok(code)
}
