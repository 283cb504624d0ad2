//! `gdrtrace job FILE...`: one view per NCCL communicator across the
//! reports (or recordings) of several nodes, or `serve`'s series in
//! Prometheus (`--prometheus`) (`crate::job`).
use crate::{
    cli::{Format, JobArgs},
    error::{Error, Result},
    job,
};

pub fn job(args: &JobArgs) -> Result<i32> {
    let mut damaged = Vec::new();
    let view = match &args.prometheus {
        Some(url) => job::prometheus::job(url, &args.selector).map_err(Error::Input)?,
        None => {
            let mut reports = Vec::with_capacity(args.files.len());
            for f in &args.files {
                let loaded = super::explain::load(f, None, None, args.damage)?;
                damaged.extend(loaded.damaged);
                reports.push((f.display().to_string(), loaded.report));
            }
            job::join(&reports)
        }
    };
    match args.format {
        Format::Text => {
            out!("{}", job::render(&view));
        }
        Format::Json => {
            let text = serde_json::to_string_pretty(&view)
                .map_err(|e| Error::Workload(format!("serializing the job view: {e}")))?;
            outln!("{text}");
        }
    }
    super::finish(0, damaged)
}
