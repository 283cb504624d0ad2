//! The typed report reads back what it writes.
use serde_json::Value;

use super::Report;

/// Every full report under `tests/fixtures/reports/` (run, `validate` and
/// untrimmed attach reports; the trimmed attach excerpts carry no `schema`
/// and are not reports) reads into `Report` and writes back the same JSON.
/// Reports older than a section (`collectives`, `facts`, ... added later)
/// read it as empty: the fields they have come back unchanged, and a report
/// of today's schema comes back whole.
#[test]
fn every_report_fixture_reads_back_unchanged() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/reports");
    let mut checked = Vec::new();
    let mut failed = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let original: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        if original.get("schema").is_none() {
            continue;
        }
        let report: Report = match serde_json::from_value(original.clone()) {
            Ok(r) => r,
            Err(e) => {
                failed.push(format!("{name}: {e}"));
                continue;
            }
        };
        let mut back = serde_json::to_value(&report).unwrap();
        let current = original.get("facts").is_some();
        if !current {
            prune(&mut back, &original);
        }
        if back != original {
            failed.push(format!("{name}: {}", first_difference(&back, &original, "")));
        }
        checked.push(name);
    }
    assert!(failed.is_empty(), "{failed:#?}");
    checked.sort();
    for want in [
        "gpu-h200-attach-full-auto.json",
        "gpu-h200-attach-full-no-p2p.json",
        "gpu-h200-attach-full-no-p2p-no-shm.json",
        "nccl-auto.json",
        "pin-churn.json",
        "standin-attach-two-jobs.json",
    ] {
        assert!(checked.iter().any(|c| c == want), "{want} not checked: {checked:?}");
    }
}

/// Where two JSON values first differ, as a path.
fn first_difference(a: &Value, b: &Value, at: &str) -> String {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys()) {
                if x.get(k) != y.get(k) {
                    return match (x.get(k), y.get(k)) {
                        (Some(p), Some(q)) => first_difference(p, q, &format!("{at}.{k}")),
                        (p, q) => format!("{at}.{k}: {p:?} vs {q:?}"),
                    };
                }
            }
            String::new()
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            let i = x.iter().zip(y).position(|(p, q)| p != q).unwrap_or(0);
            first_difference(&x[i], &y[i], &format!("{at}[{i}]"))
        }
        _ => format!("{at}: {a} vs {b}"),
    }
}

/// Drops from `back` what `original` does not have (sections and fields
/// added after it was written), at every depth.
fn prune(back: &mut Value, original: &Value) {
    match (back, original) {
        (Value::Object(x), Value::Object(y)) => {
            x.retain(|k, _| y.contains_key(k));
            for (k, v) in x.iter_mut() {
                prune(v, &y[k]);
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for (p, q) in x.iter_mut().zip(y) {
                prune(p, q);
            }
        }
        _ => {}
    }
}
