//! Property tests of the readers of untrusted input (issue 13 item 15): the
//! recording, report, baseline, thresholds and NCCL-log readers, fed
//! mutations of real fixtures (bytes flipped, cut, lines dropped or
//! repeated, JSON fields replaced by hostile values) and generated text.
//! Each must answer Ok or a one-line error, never panic; a mutation that
//! keeps a document valid must still be read. Case counts are bounded
//! (`CASES`) so the suite stays fast in CI; proptest shrinks a failure to a
//! minimal input and prints its seed.
use gdrtrace::{
    classify::comm,
    compare::{self, Metrics, Thresholds},
    explain, recording, report,
};
use proptest::prelude::*;
use serde_json::Value;

const CASES: u32 = 48;

fn fixture(rel: &str) -> String {
    std::fs::read_to_string(integration_tests::fixture(rel)).expect("fixture")
}

fn one_line(e: &str) {
    assert!(!e.contains('\n'), "error spans lines: {e:?}");
    assert!(!e.is_empty(), "empty error");
}

/// A byte-level mutation of a text.
#[derive(Clone, Debug)]
enum Edit {
    Cut(usize),
    Flip(usize, u8),
    DropLine(usize),
    RepeatLine(usize),
    Insert(usize, Vec<u8>),
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let edit = prop_oneof![
        any::<usize>().prop_map(Edit::Cut),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Flip(i, b)),
        any::<usize>().prop_map(Edit::DropLine),
        any::<usize>().prop_map(Edit::RepeatLine),
        (any::<usize>(), proptest::collection::vec(any::<u8>(), 0..24)).prop_map(|(i, b)| Edit::Insert(i, b)),
    ];
    proptest::collection::vec(edit, 1..4)
}

fn apply(text: &str, edits: &[Edit]) -> Vec<u8> {
    let mut b = text.as_bytes().to_vec();
    for e in edits {
        let n = b.len().max(1);
        match e {
            Edit::Cut(i) => b.truncate(i % n),
            Edit::Flip(i, v) => {
                if !b.is_empty() {
                    let i = i % b.len();
                    b[i] = *v;
                }
            }
            Edit::DropLine(i) | Edit::RepeatLine(i) => {
                let mut lines: Vec<Vec<u8>> = b.split(|c| *c == b'\n').map(<[u8]>::to_vec).collect();
                let k = i % lines.len();
                if matches!(e, Edit::DropLine(_)) {
                    lines.remove(k);
                } else {
                    let l = lines[k].clone();
                    lines.insert(k, l);
                }
                b = lines.join(&b'\n');
            }
            Edit::Insert(i, bytes) => {
                let i = i % n;
                let i = i.min(b.len());
                b.splice(i..i, bytes.iter().copied());
            }
        }
    }
    b
}

/// A hostile JSON value to put in place of a field.
fn hostile() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        Just(serde_json::json!(-1)),
        Just(serde_json::json!(-200)),
        Just(serde_json::json!(u64::MAX)),
        Just(serde_json::json!(1e308)),
        Just(serde_json::json!(-1.5)),
        Just(serde_json::json!("")),
        Just(serde_json::json!("not base64!")),
        Just(serde_json::json!([])),
        Just(serde_json::json!({})),
        Just(serde_json::json!(true)),
        any::<i64>().prop_map(|v| serde_json::json!(v)),
        "[a-z0-9/ ]{0,12}".prop_map(Value::from),
    ]
}

/// Every (object field or array element) path in a value.
fn paths(v: &Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                at.push(k.clone());
                out.push(at.clone());
                paths(x, at, out);
                at.pop();
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate().take(8) {
                at.push(i.to_string());
                out.push(at.clone());
                paths(x, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

fn replace(v: &mut Value, path: &[String], with: Value) {
    let mut cur = v;
    for (i, k) in path.iter().enumerate() {
        let next = match cur {
            Value::Object(m) => m.get_mut(k),
            Value::Array(a) => k.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
            _ => None,
        };
        match next {
            Some(n) if i + 1 == path.len() => {
                *n = with;
                return;
            }
            Some(n) => cur = n,
            None => return,
        }
    }
}

/// Replaces up to three fields of `doc` (chosen among all its paths).
fn mutate_json(doc: &Value, picks: &[(usize, Value)]) -> Value {
    let mut all = Vec::new();
    paths(doc, &mut Vec::new(), &mut all);
    let mut v = doc.clone();
    for (i, with) in picks {
        replace(&mut v, &all[i % all.len()], with.clone());
    }
    v
}

/// Everything `compare` does with one document (and a good baseline).
fn compare_everything(name: &str, v: Value, good: &compare::Document) {
    match compare::document(name, v) {
        Ok(doc) => {
            for r in &doc.reports {
                let _ = Metrics::of(r);
            }
            if let Ok(c) = compare::compare(good, &doc, &Thresholds::default(), true) {
                let _ = compare::render::text(&c);
                let _ = c.exit_code();
            }
        }
        Err(e) => one_line(&e),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    /// The recording reader (`replay`, `explain RECORDING`), streaming.
    #[test]
    fn recordings(edits in edits()) {
        let text = fixture("recordings/pin-churn.rec");
        let bytes = apply(&text, &edits);
        match recording::read(&mut bytes.as_slice()) {
            Ok(rec) => {
                let _ = gdrtrace::cmd::replay::rebuild(&rec, None);
            }
            Err(e) => one_line(&e),
        }
    }

    /// The report reader of `compare` and of `explain`'s rule table.
    #[test]
    fn reports(picks in proptest::collection::vec((any::<usize>(), hostile()), 1..4)) {
        let good: Value = serde_json::from_str(&fixture("reports/pin-churn.json")).expect("fixture");
        let v = mutate_json(&good, &picks);
        // What the typed reader takes, the rules explain and the text renders.
        if let Ok(mut r) = report::read_typed(&v) {
            explain::fill(&mut r);
            let _ = report::text::explain(&r);
        }
        let base = compare::document("base", serde_json::from_str(&fixture("baselines/vm-6.1.json")).expect("fixture"))
            .expect("the fixture baseline is valid");
        compare_everything("report", v, &base);
    }

    /// The baseline reader of `compare`.
    #[test]
    fn baselines(picks in proptest::collection::vec((any::<usize>(), hostile()), 1..4), edits in edits()) {
        let text = fixture("baselines/vm-6.1.json");
        let good: Value = serde_json::from_str(&text).expect("fixture");
        let base = compare::document("base", good.clone()).expect("the fixture baseline is valid");
        compare_everything("baseline", mutate_json(&good, &picks), &base);
        let bytes = apply(&text, &edits);
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(v) => compare_everything("edited", v, &base),
            Err(e) => one_line(&e.to_string()),
        }
    }

    /// The thresholds reader: generated tables of known and unknown keys
    /// with values of every type, and raw edits of a valid file.
    #[test]
    fn thresholds(
        tables in proptest::collection::vec(
            (
                prop_oneof![Just("[defaults]".to_string()), "[a-z-]{1,12}".prop_map(|w| format!("[workloads.{w}]")), Just("[workloads]".to_string())],
                proptest::collection::vec(
                    (
                        prop_oneof![
                            Just("bandwidth_decrease_pct"), Just("latency_min_samples"), Just("probe_lost_fails"),
                            Just("latency_p99_increase_pct"), Just("registrations_increase_pct"), Just("no_such_key"),
                        ],
                        prop_oneof![
                            Just("5".to_string()), Just("-1".to_string()), Just("1e999".to_string()), Just("nan".to_string()),
                            Just("true".to_string()), Just("\"x\"".to_string()), Just("[1, 2]".to_string()), Just("{}".to_string()),
                            Just("18446744073709551616".to_string()), any::<i64>().prop_map(|v| v.to_string()),
                        ],
                    ),
                    0..4,
                ),
            ),
            0..4,
        ),
        edits in edits(),
    ) {
        let mut text = String::new();
        for (header, keys) in &tables {
            text.push_str(header);
            text.push('\n');
            for (k, v) in keys {
                text.push_str(&format!("{k} = {v}\n"));
            }
        }
        for t in [text, String::from_utf8_lossy(&apply("[defaults]\nbandwidth_decrease_pct = 5\n[workloads.pin-churn]\nlatency_p50_increase_pct = 100\n", &edits)).into_owned()] {
            match Thresholds::parse(&t) {
                Ok(th) => {
                    let l = th.for_workload("pin-churn");
                    prop_assert!(l.bandwidth_decrease_pct >= 0.0 && l.bandwidth_decrease_pct.is_finite());
                    if let Err(e) = th.check_workloads(&["pin-churn"]) {
                        one_line(&e);
                    }
                }
                Err(e) => one_line(&e),
            }
        }
    }

    /// The NCCL-log reader: real logs edited, and generated INFO/WARN lines.
    #[test]
    fn nccl_logs(
        edits in edits(),
        lines in proptest::collection::vec(
            (
                0u32..5,
                prop_oneof![
                    Just("NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM".to_string()),
                    Just("NCCL INFO Channel 00/0 : 0[0] -> 1[1] via".to_string()),
                    Just("NCCL INFO comm 0x5 rank 0 nranks 2 cudaDev 0 busId 1000 commId 0x1 - Init COMPLETE".to_string()),
                    Just("NCCL WARN Call to ibv_reg_dmabuf_mr failed with error Operation not supported".to_string()),
                    Just("NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'".to_string()),
                    "[ -~]{0,60}".prop_map(|s| format!("NCCL INFO {s}")),
                ],
            ),
            0..12,
        ),
    ) {
        let real = fixture("logs/nccl-auto.log");
        let edited = String::from_utf8_lossy(&apply(&real, &edits)).into_owned();
        let generated: String = lines
            .iter()
            .map(|(pid, l)| format!("host:{pid}:{pid} [0] {l}\n"))
            .collect();
        for text in [edited, generated] {
            let _ = comm::parse_nccl_log(&text);
            let log = comm::nccl_log_against(&text, &|_, _| vec![gdrtrace::classify::Transport::P2pNvlink]);
            let _ = serde_json::to_value(&log);
        }
    }
}

/// The mutations are not vacuous: unmutated fixtures are read, and the
/// edits above do produce refusals.
#[test]
fn fixtures_are_read_and_edits_are_refused() {
    let rec = fixture("recordings/pin-churn.rec");
    assert!(recording::parse(&rec).is_ok());
    let e = recording::read(&mut apply(&rec, &[Edit::Cut(rec.len() / 2)]).as_slice()).expect_err("cut");
    one_line(&e);
    let good: Value = serde_json::from_str(&fixture("reports/pin-churn.json")).expect("fixture");
    assert!(compare::document("r", good.clone()).is_ok());
    let bad = mutate_json(&good, &[(0, serde_json::json!(-1))]);
    let mut all = Vec::new();
    paths(&good, &mut Vec::new(), &mut all);
    assert!(all.len() > 100, "{} paths", all.len());
    let _ = compare::document("r", bad);
    let mut neg = good;
    // untyped: a value no typed report can hold, written on purpose.
    neg["operations"][0]["calls"] = serde_json::json!(-1);
    let e = compare::document("r", neg).expect_err("negative calls refused");
    assert!(e.contains("operations[0].calls"), "{e}");
}
