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
    pub profile: compare::Profile,
    /// The exit status of the validate run behind it (0 with --from).
    pub validate_exit_code: i32,
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
            };
            (vec![run], vec![report], format!("report {name}"), 0)
        }
        None => {
            let v = crate::progress::step("baseline record: validate", || {
                super::validate::run_validate(&args.validate)
            })?;
            let (code, reports) = (v.code, v.reports);
            let runs = reports
                .iter()
                .map(|(workload, r)| {
                    let report = serde_json::to_value(r)
                        .map_err(|e| Error::Workload(format!("serializing the {workload} report: {e}")))?;
                    Ok(Run {
                        workload: workload.clone(),
                        report,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let reports = reports.into_iter().map(|(_, r)| r).collect();
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
    if args.validate.trace.format == Format::Json {
        let doc = RecordDoc {
            schema: SCHEMA.into(),
            out: args.out.display().to_string(),
            source: baseline.source.clone(),
            workloads: baseline.runs.iter().map(|r| r.workload.clone()).collect(),
            profile: p.clone(),
            validate_exit_code: code,
        };
        crate::output::print_json("the baseline summary", &doc)?;
        return Ok(code);
    }
    outln!(
        "baseline: {} run(s) ({}) written to {}; kernel {}, lockdown {}, gpu {}, nic {}, probe catalog {}",
        baseline.runs.len(),
        baseline
            .runs
            .iter()
            .map(|r| r.workload.as_str())
            .collect::<Vec<_>>()
            .join(", "),
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
