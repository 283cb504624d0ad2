//! `--format json` on every command (docs/formats.md): the output parses,
//! names its schema, and round-trips through the command's typed document
//! (Deserialize, then Serialize gives the same JSON). `compare --format
//! json` on the kernel-upgrade example lists the regressed metrics, with
//! the exit status of the text form.
use gdrtrace::{
    cmd::{baseline::RecordDoc, doctor::Doctor, explain::ExplainDoc, validate::ValidateDoc},
    compare::{Status, json::CompareDoc},
    topo::TopoDoc,
};
use integration_tests::{can_trace, fixture, parse_as, path_str as s, run, stderr, stdout, to_json};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

/// Parses `out` as one JSON document with `schema`, reads it into `T` and
/// writes it back: the same JSON.
fn round_trip<T: Serialize + DeserializeOwned>(what: &str, out: &str, schema: &str) -> T {
    let v: Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{what}: not one JSON document ({e}): {out}"));
    // The document's own field, before the full type reads it.
    #[derive(serde::Deserialize)]
    struct Schema {
        schema: String,
    }
    assert_eq!(parse_as::<Schema>(what, out).schema, schema, "{what}");
    let typed: T = parse_as(what, out);
    assert_eq!(
        to_json(&typed),
        v,
        "{what}: the typed document does not write back the same JSON"
    );
    typed
}

fn code(o: &std::process::Output) -> i32 {
    o.status.code().expect("exited")
}

#[test]
fn explain_json_round_trips() {
    for src in [
        "recordings/standin-nccl-no-p2p.rec",
        "recordings/gpu-h200-nccl-no-p2p.rec.gz",
    ] {
        let o = run(&["explain", &fixture(src), "--format", "json"]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let v = round_trip::<ExplainDoc>(src, &stdout(&o), "gdrtrace.explain/v1");
        assert!(v.findings.iter().any(|f| f.rule == "nccl-env-forced"), "{src}: {v:?}");
        assert!(!v.verdicts.is_empty());
    }
}

fn baseline(name: &str) -> String {
    fixture(&format!("baselines/{name}"))
}

#[test]
fn compare_json_lists_the_regressed_metrics_of_the_kernel_upgrade() {
    let (old, new) = (baseline("vm-6.1.json"), baseline("vm-6.12.json"));
    let text = run(&["compare", &old, &new, "--allow-profile-change"]);
    let o = run(&["compare", &old, &new, "--allow-profile-change", "--format", "json"]);
    assert_eq!(code(&o), code(&text), "the exit status is the text form's");
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let v = round_trip::<CompareDoc>("compare", &stdout(&o), "gdrtrace.compare/v1");
    assert_eq!(v.result, "regression");
    assert_eq!(v.exit_code, 1);
    let regressed: Vec<(String, String)> = v
        .metrics
        .iter()
        .filter(|m| m.verdict == Status::Regression)
        .map(|m| (m.workload.clone(), m.metric.clone()))
        .collect();
    assert!(!regressed.is_empty());
    // 6.12 pins io_uring buffers with pin_user_pages_fast: the 6.1 op is gone.
    assert!(
        regressed
            .iter()
            .any(|(w, m)| w == "pin-churn" && m == "pin_user_pages calls"),
        "{regressed:?}"
    );
    // Every regressed row of the text report is in the JSON, and no other.
    let text = stdout(&text);
    let text_rows = text.lines().filter(|l| l.trim_end().ends_with("REGRESSION")).count();
    assert_eq!(regressed.len(), text_rows, "{regressed:?}\n{text}");
    // Every metric's threshold and baseline are strings: CompareDoc read them.
    assert!(!v.metrics.is_empty());
    assert!(v.profile_differences.iter().any(|d| d.field == "kernel"));
    // Could not compare: exit 2 and one line, as the text form.
    let o = run(&["compare", &old, &new, "--format", "json"]);
    assert_eq!(code(&o), 2);
    assert!(stdout(&o).is_empty());
}

#[test]
fn topo_json_round_trips_and_json_is_an_alias() {
    let o = run(&["topo", "--format", "json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v = round_trip::<TopoDoc>("topo", &stdout(&o), "gdrtrace.topo/v1");
    let old = run(&["topo", "--json"]);
    let w: TopoDoc = parse_as("--json still prints the document", &stdout(&old));
    assert_eq!(v.schema, w.schema);
    assert_eq!(to_json(&v.topo.gpus), to_json(&w.topo.gpus));
    let both = run(&["topo", "--json", "--format", "text"]);
    assert_eq!(code(&both), 2, "--json and --format conflict");
}

#[test]
fn doctor_json_round_trips_and_json_is_an_alias() {
    let o = run(&["doctor", "--format", "json"]);
    // 0 usable, 1 not usable, 4 not permitted: all print the findings.
    assert!([0, 1, 4].contains(&code(&o)), "{}", stderr(&o));
    let v = round_trip::<Doctor>("doctor", &stdout(&o), "gdrtrace.doctor/v1");
    let old = run(&["doctor", "--json"]);
    let w: Doctor = parse_as("--json still prints the document", &stdout(&old));
    assert_eq!((v.schema, &v.kernel), (w.schema, &w.kernel));
}

#[test]
fn baseline_record_json_round_trips() {
    let dir = integration_tests::scratch("formats-baseline");
    let out = dir.join("base.json");
    let o = run(&[
        "baseline",
        "record",
        "--from",
        &fixture("reports/nccl-auto.json"),
        "--out",
        s(&out),
        "--format",
        "json",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v = round_trip::<RecordDoc>("baseline record", &stdout(&o), "gdrtrace.baseline-record/v1");
    assert_eq!(v.workloads[0], "nccl-auto");
    assert_eq!(v.out, s(&out));
    assert_eq!(v.profile.nccl.as_deref(), Some("2.28.3"));
    assert!(out.is_file());
}

#[test]
fn validate_json_is_one_document_with_checks_and_reports() {
    if !can_trace("validate_json_is_one_document_with_checks_and_reports") {
        return;
    }
    let o = run(&["validate", "--iterations", "20", "--no-ucx", "--format", "json"]);
    let out = stdout(&o);
    let v = round_trip::<ValidateDoc>("validate", &out, "gdrtrace.validate/v1");
    assert_eq!(v.exit_code, code(&o), "{}", stderr(&o));
    assert!(!v.checks.is_empty());
    assert_eq!(v.workloads[0].workload, "pin-churn");
    assert_eq!(v.workloads[0].report.schema, "gdrtrace.report/v1");
    // The text went to standard error.
    assert!(stderr(&o).contains("validate: pin-churn"), "{}", stderr(&o));
}
