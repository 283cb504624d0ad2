//! `gdrtrace explain [REPORT.json | RECORDING]`.
use std::path::PathBuf;

use crate::{
    classify::{Transport, explain},
    cli::ExplainArgs,
    error::{Error, Result},
    input::{self, Input},
};

/// Explains a saved report (or a recording, replayed first; or a report on
/// stdin). Verdicts are recomputed when an NCCL log is given.
pub fn explain(args: &ExplainArgs) -> Result<i32> {
    let path = match &args.report {
        Some(p) => p.clone(),
        None => {
            // SAFETY: isatty has no preconditions.
            if unsafe { libc::isatty(0) } == 1 {
                return Err(Error::Usage(
                    "explain needs a report (--json FILE of run, attach, validate or replay), a recording, or a report on stdin".into(),
                ));
            }
            PathBuf::from("-")
        }
    };
    let log = args.nccl_log.as_deref().map(input::read_to_string).transpose()?;
    let ucx_log = args.ucx_log.as_deref().map(input::read_to_string).transpose()?;
    // One reader for both kinds (gzip, size limit, regular files): the first
    // line tells a recording from a report.
    let mut input = Input::open(&path)?;
    let mut first = String::new();
    input.next_line(&mut first).map_err(|e| input.error(e))?;
    let recording = first.contains("\"gdrtrace.recording/");
    input.unread(first + "\n");
    let mut r: serde_json::Value = if recording {
        let rec = crate::recording::read(&mut input).map_err(|e| input.error(e))?;
        let (mut report, _) = super::replay::rebuild(&rec, log.as_deref()).map_err(|e| input.error(e))?;
        if let Some(l) = &ucx_log {
            report.corroborate_ucx(l);
        }
        serde_json::to_value(&report).map_err(|e| Error::Workload(format!("serializing the report: {e}")))?
    } else {
        let mut r = input::json_of(&mut input)?;
        if r["schema"] != crate::report::SCHEMA {
            return Err(Error::Input(format!(
                "{} has schema {} (expected {} or a recording)",
                input.name(),
                r["schema"],
                crate::report::SCHEMA
            )));
        }
        for note in rejudge(&mut r, log.as_deref()) {
            errln!("gdrtrace: note: {}: {note}", input.name());
        }
        r
    };
    if let (Some(l), false) = (&ucx_log, recording) {
        corroborate_ucx(&mut r, l);
    }
    let e = explain::explain(&r);
    let verdicts: Vec<crate::classify::comm::Verdict> =
        serde_json::from_value(r["verdicts"].clone()).unwrap_or_default();
    out!("{}", crate::report::text::verdicts(&verdicts, ""));
    out!("{}", explain::render(&r, &e));
    Ok(0)
}

/// The verdicts of a saved report, judged again from the inputs it holds by
/// the function that judged them live (`judge`), corroborated
/// with an NCCL log when given. The report's own verdicts are what the live
/// trace printed, and they stay; where this build judges the same evidence
/// differently (a report of another version), a note says so.
pub fn rejudge(r: &mut serde_json::Value, log: Option<&str>) -> Vec<String> {
    use crate::{
        classify::comm::{self, Verdict},
        judge,
    };
    let mut notes = Vec::new();
    let inputs: judge::Inputs = match serde_json::from_value(r.clone()) {
        Ok(i) => i,
        Err(e) => {
            notes.push(format!(
                "its processes cannot be read for judging ({e}): its verdicts are shown as written"
            ));
            judge::Inputs::default()
        }
    };
    let again = judge::verdicts(&inputs);
    let carried: Option<Vec<Verdict>> = serde_json::from_value(r["verdicts"].clone()).ok();
    let mut verdicts = match carried {
        Some(carried) => {
            for v in &again {
                match carried.iter().find(|c| c.pid == v.pid) {
                    Some(c) if c.transport != v.transport => notes.push(format!(
                        "pid {}: the report says {}, this gdrtrace judges the same evidence {}",
                        v.pid,
                        c.transport.name(),
                        v.transport.name()
                    )),
                    None => notes.push(format!(
                        "pid {}: no verdict in the report, this gdrtrace judges it {}",
                        v.pid,
                        v.transport.name()
                    )),
                    Some(_) => {}
                }
            }
            carried
        }
        None => again,
    };
    let Some(log) = log else {
        if let Ok(v) = serde_json::to_value(&verdicts) {
            r["verdicts"] = v;
        }
        return notes;
    };
    for v in &mut verdicts {
        v.nccl_log = None;
    }
    comm::corroborate(&mut verdicts, &comm::parse_nccl_log(log));
    let coll: Vec<(u32, String, &'static str)> = r["collectives"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    (
                        c["pid"].as_u64().unwrap_or(0) as u32,
                        c["communicator"].as_str().unwrap_or("").to_string(),
                        Transport::from_name(c["transport"].as_str().unwrap_or("")).name(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let per = comm::nccl_log_against(log, &|pid, handle| {
        coll.iter()
            .find(|(p, h, _)| *p == pid && h == handle)
            .map(|x| x.2)
            .or_else(|| verdicts.iter().find(|v| v.pid == pid).map(|v| v.transport.name()))
    });
    if let Ok(v) = serde_json::to_value(&verdicts) {
        r["verdicts"] = v;
    }
    if let Ok(v) = serde_json::to_value(&per) {
        r["nccl_log"] = v;
    }
    notes
}

/// Compares a saved report's UCX paths with a UCX log.
fn corroborate_ucx(r: &mut serde_json::Value, log: &str) {
    let mut ux: crate::classify::ucx::UcxReport = serde_json::from_value(r["ucx"].clone()).unwrap_or_default();
    crate::classify::ucx_log::corroborate(&mut ux, log, r["facts"]["nvlink"].as_bool());
    if let Ok(v) = serde_json::to_value(&ux) {
        r["ucx"] = v;
    }
}
