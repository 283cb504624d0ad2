//! `gdrtrace explain [REPORT.json | RECORDING]`.
use std::io::Read as _;

use crate::{
    classify::explain,
    cli::ExplainArgs,
    error::{Error, Result},
    topo,
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
    let ucx_log = match &args.ucx_log {
        Some(p) => Some(std::fs::read_to_string(p).map_err(|e| Error::io(format!("reading {}", p.display()), e))?),
        None => None,
    };
    let first = text.lines().next().unwrap_or("");
    let mut r: serde_json::Value = if first.contains("\"gdrtrace.recording/") {
        let rec = match crate::events::recording::parse(&text) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("gdrtrace: {name}: {e}");
                return Ok(2);
            }
        };
        let mut report = match super::replay::rebuild(&rec, log.as_deref()) {
            Ok((r, _)) => r,
            Err(e) => {
                eprintln!("gdrtrace: {name}: {e}");
                return Ok(2);
            }
        };
        if let Some(l) = &ucx_log {
            report.corroborate_ucx(l);
        }
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
        if let Some(log) = &log {
            corroborate(&mut r, log);
        }
        r
    };
    if let (Some(l), false) = (&ucx_log, first.contains("\"gdrtrace.recording/")) {
        corroborate_ucx(&mut r, l);
    }
    let e = explain::explain(&r);
    for v in r["verdicts"].as_array().map_or(&[][..], |a| a.as_slice()) {
        println!(
            "pid {} {}: {}{}",
            v["pid"],
            v["comm"].as_str().unwrap_or(""),
            v["transport"].as_str().unwrap_or("unknown"),
            if v["host_staged"] == true { " (host-staged)" } else { "" }
        );
        for ev in v["evidence"].as_array().map_or(&[][..], |a| a.as_slice()) {
            println!("  evidence: {}", ev.as_str().unwrap_or(""));
        }
        if let Some(c) = v["cause"].as_str() {
            println!("  cause: {c}");
        }
        if let Some(l) = v["nccl_log"].as_object() {
            let agree = if l.get("agrees") == Some(&serde_json::Value::Bool(true)) {
                "agrees"
            } else {
                "DISAGREES"
            };
            println!("  NCCL log: via {} ({agree})", l["nccl_says"].as_str().unwrap_or(""));
        }
    }
    print!("{}", explain::render(&r, &e));
    Ok(0)
}

/// Recomputes a saved report's verdicts from its processes and compares
/// them, and each communicator, with an NCCL log.
fn corroborate(r: &mut serde_json::Value, log: &str) {
    use crate::classify::{
        Transport,
        comm::{self, Evidence},
    };
    let nvlink = r["facts"]["nvlink"].as_bool().or_else(|| topo::discover().nvlink());
    let map = |v: &serde_json::Value| -> std::collections::BTreeMap<String, u64> {
        v.as_object()
            .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_u64()?))).collect())
            .unwrap_or_default()
    };
    let strings = |v: &serde_json::Value| -> std::collections::BTreeMap<String, String> {
        v.as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default()
    };
    let evidence: Vec<Evidence> = r["processes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| Evidence {
                    pid: p["pid"].as_u64().unwrap_or(0) as u32,
                    comm: p["comm"].as_str().unwrap_or("").to_string(),
                    calls: map(&p["calls"]),
                    env: strings(&p["env"]),
                    nvlink,
                })
                .collect()
        })
        .unwrap_or_default();
    let mut verdicts: Vec<_> = evidence.iter().filter_map(comm::verdict).collect();
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
}

/// Compares a saved report's UCX paths with a UCX log.
fn corroborate_ucx(r: &mut serde_json::Value, log: &str) {
    let mut ux: crate::classify::ucx::UcxReport = serde_json::from_value(r["ucx"].clone()).unwrap_or_default();
    crate::classify::ucx_log::corroborate(&mut ux, log, r["facts"]["nvlink"].as_bool());
    if let Ok(v) = serde_json::to_value(&ux) {
        r["ucx"] = v;
    }
}
