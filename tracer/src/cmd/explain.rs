//! `gdrtrace explain REPORT`.
use std::collections::BTreeMap;

use crate::{
    classify::comm::{self, Evidence},
    cli::ExplainArgs,
    error::{Error, Result},
    topo,
};

fn map(v: &serde_json::Value) -> BTreeMap<String, u64> {
    v.as_object()
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_u64()?))).collect())
        .unwrap_or_default()
}

fn strings(v: &serde_json::Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

pub fn explain(args: &ExplainArgs) -> Result<i32> {
    let text = std::fs::read_to_string(&args.report)
        .map_err(|e| Error::io(format!("reading {}", args.report.display()), e))?;
    let r: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::Usage(format!("{} is not a JSON report: {e}", args.report.display())))?;
    if r["schema"] != crate::report::SCHEMA {
        return Err(Error::Usage(format!(
            "{} has schema {} (expected {})",
            args.report.display(),
            r["schema"],
            crate::report::SCHEMA
        )));
    }
    let nvlink = topo::discover().nvlink();
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
    if let Some(p) = &args.nccl_log {
        let log = std::fs::read_to_string(p).map_err(|e| Error::io(format!("reading {}", p.display()), e))?;
        comm::corroborate(&mut verdicts, &comm::parse_nccl_log(&log));
    }
    if verdicts.is_empty() {
        println!("explain: no process in this report moved GPU data between processes (no NCCL or IPC evidence)");
    }
    print!("{}", crate::report::text::verdicts(&verdicts, ""));
    // Staged ratio, from the operations table.
    let ops = r["operations"].as_array().cloned().unwrap_or_default();
    let total: u64 = ops.iter().filter_map(|o| o["bytes"].as_u64()).sum();
    let staged: u64 = ops
        .iter()
        .filter(|o| matches!(o["transport"].as_str(), Some("host-staged" | "shm" | "socket")))
        .filter_map(|o| o["bytes"].as_u64())
        .sum();
    if total > 0 {
        println!(
            "host-staged bytes: {staged} of {total} ({:.1}%)",
            staged as f64 * 100.0 / total as f64
        );
    }
    Ok(0)
}
