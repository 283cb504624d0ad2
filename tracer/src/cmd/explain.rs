//! `gdrtrace explain [REPORT.json | RECORDING]`.
use std::io::Read as _;

use crate::{
    classify::{Transport, explain},
    cli::ExplainArgs,
    error::{Error, Result},
};

/// Explains a saved report (or a recording, replayed first; or a report on
/// stdin). Verdicts are recomputed when an NCCL log is given.
pub fn explain(args: &ExplainArgs) -> Result<i32> {
    let (name, text) = match &args.report {
        Some(p) => (
            p.display().to_string(),
            std::fs::read_to_string(p).map_err(|e| Error::io(format!("reading {}", p.display()), e))?,
        ),
        None => {
            // SAFETY: isatty has no preconditions.
            if unsafe { libc::isatty(0) } == 1 {
                return Err(Error::Usage(
                    "explain needs a report (--json FILE of run, attach, validate or replay), a recording, or a report on stdin".into(),
                ));
            }
            let mut t = String::new();
            std::io::stdin()
                .read_to_string(&mut t)
                .map_err(|e| Error::io("reading the report from stdin", e))?;
            ("stdin".to_string(), t)
        }
    };
    let log = match &args.nccl_log {
        Some(p) => Some(std::fs::read_to_string(p).map_err(|e| Error::io(format!("reading {}", p.display()), e))?),
        None => None,
    };
    let first = text.lines().next().unwrap_or("");
    let r: serde_json::Value = if first.contains("\"gdrtrace.recording/") {
        let rec = match crate::events::recording::parse(&text) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("gdrtrace: {name}: {e}");
                return Ok(2);
            }
        };
        let report = match super::replay::rebuild(&rec, log.as_deref()) {
            Ok((r, _)) => r,
            Err(e) => {
                eprintln!("gdrtrace: {name}: {e}");
                return Ok(2);
            }
        };
        serde_json::to_value(&report).map_err(|e| Error::Workload(format!("serializing the report: {e}")))?
    } else {
        let mut r: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Error::Usage(format!("{name} is not a JSON report or a recording: {e}")))?;
        if r["schema"] != crate::report::SCHEMA {
            return Err(Error::Usage(format!(
                "{name} has schema {} (expected {} or a recording)",
                r["schema"],
                crate::report::SCHEMA
            )));
        }
        for note in rejudge(&mut r, log.as_deref()) {
            eprintln!("gdrtrace: note: {name}: {note}");
        }
        r
    };
    let e = explain::explain(&r);
    let verdicts: Vec<crate::classify::comm::Verdict> =
        serde_json::from_value(r["verdicts"].clone()).unwrap_or_default();
    print!("{}", crate::report::text::verdicts(&verdicts, ""));
    print!("{}", explain::render(&r, &e));
    Ok(0)
}

/// The verdicts of a saved report, judged again from the inputs it holds by
/// the function that judged them live (`classify::judge`), corroborated
/// with an NCCL log when given. The report's own verdicts are what the live
/// trace printed, and they stay; where this build judges the same evidence
/// differently (a report of another version), a note says so.
pub fn rejudge(r: &mut serde_json::Value, log: Option<&str>) -> Vec<String> {
    use crate::classify::{
        comm::{self, Verdict},
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
