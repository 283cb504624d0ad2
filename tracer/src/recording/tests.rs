use tracer_common::kind;

use super::*;

fn line<T: Serialize>(ty: &str, record: &T) -> Value {
    line_json(ty, record).expect("serializable")
}

#[test]
fn event_round_trip_and_hex_numbers() {
    let mut e = Event {
        kind: kind::CALL,
        op: op_code("ibv_reg_mr").unwrap(),
        pid: 10,
        tid: 11,
        start_ns: 5,
        dur_ns: 7,
        args: [1, 0x7f00_0000_1000, 4096, 0, 0, 0xdead_beef_0000_1234],
        ret: 0x5555_0000_1000,
        comm: [0; 16],
    };
    e.comm[..3].copy_from_slice(b"abc");
    let v = line(EventLine::TYPE, &EventLine::of(&e));
    assert_eq!(v["type"], "event");
    assert_eq!(v["op"], "ibv_reg_mr");
    assert_eq!(v["args"][1], "0x7f0000001000");
    let back: EventLine = serde_json::from_value(v).unwrap();
    assert_eq!(format!("{:?}", back.event().unwrap()), format!("{e:?}"));
    // Numbers: hex, decimal strings (negative: two's complement) and integers.
    let h: Hex = serde_json::from_value(Value::from("-14")).unwrap();
    assert_eq!(h.0, (-14i64) as u64);
    assert_eq!(serde_json::to_value(Ret(-14)).unwrap(), Value::from(-14));
    assert_eq!(
        serde_json::to_value(Ret(1 << 60)).unwrap(),
        Value::from("0x1000000000000000")
    );
    // A count is never negative or fractional, an id fits 32 bits.
    for bad in [serde_json::json!(-5), serde_json::json!("-5"), serde_json::json!(1.5)] {
        let e = serde_json::from_value::<Count>(bad.clone()).expect_err("refused");
        assert!(e.to_string().contains("not a non-negative integer"), "{bad}: {e}");
    }
    assert!(serde_json::from_value::<Pid>(serde_json::json!(1u64 << 40)).is_err());
    let unknown: EventLine =
        serde_json::from_value(serde_json::json!({"kind": "call", "op": "no_such_op", "pid": 1, "start_ns": 1}))
            .unwrap();
    assert!(unknown.event().is_err());
}

#[test]
fn bad_recordings_are_refused_with_a_reason() {
    assert!(parse("").unwrap_err().contains("empty"));
    assert!(
        parse("{\"type\":\"header\",\"schema\":\"gdrtrace.recording/v9\"}")
            .unwrap_err()
            .contains("newer")
    );
    assert!(
        parse("{\"schema\":\"gdrtrace.report/v1\"}")
            .unwrap_err()
            .contains("not a gdrtrace recording")
    );
    let header = serde_json::to_string(&serde_json::json!({
        "type": "header", "schema": SCHEMA, "tool_version": "0", "host": {"kernel": "k", "lockdown": "none"},
        "facts": {}, "clock": "CLOCK_MONOTONIC", "started_ns": 0
    }))
    .unwrap();
    let ev = "{\"type\":\"event\",\"kind\":\"exit\",\"pid\":3,\"start_ns\":9}";
    assert!(parse(&format!("{header}\n{ev}\n")).unwrap_err().contains("truncated"));
    assert!(
        parse(&format!("{header}\n{ev}\n{{\"type\":"))
            .unwrap_err()
            .contains("line 3")
    );
    let footer = "{\"type\":\"footer\",\"command\":[],\"duration_s\":1.0,\"events\":2,\"loss\":{},\"pin_counters\":{},\"coverage\":[],\"kernel_slots\":[]}";
    assert!(
        parse(&format!("{header}\n{ev}\n{footer}\n"))
            .unwrap_err()
            .contains("missing")
    );
    let ok = parse(&format!("{header}\n{ev}\n{ev}\n{footer}\n")).unwrap();
    assert_eq!(ok.inputs.len(), 2);
    // The field is named.
    let neg = "{\"type\":\"event\",\"kind\":\"exit\",\"pid\":-1,\"start_ns\":9}";
    let e = parse(&format!("{header}\n{neg}\n{footer}\n")).unwrap_err();
    assert!(
        e.starts_with("line 2: event field pid: -1 is not a non-negative integer"),
        "{e}"
    );
}

#[test]
fn damaged_lines_are_skipped_and_counted() {
    let header = serde_json::to_string(&serde_json::json!({
        "type": "header", "schema": SCHEMA, "tool_version": "0", "host": {"kernel": "k", "lockdown": "none"},
        "facts": {}, "clock": "CLOCK_MONOTONIC", "started_ns": 0
    }))
    .unwrap();
    let ev = "{\"type\":\"event\",\"kind\":\"exit\",\"pid\":3,\"start_ns\":9}";
    let footer = |events: u64| {
        format!(
            "{{\"type\":\"footer\",\"command\":[],\"duration_s\":1.0,\"events\":{events},\"loss\":{{}},\"pin_counters\":{{}},\"coverage\":[],\"kernel_slots\":[]}}"
        )
    };
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let lines = [
        format!("{{\"type\":\"later\",\"v\":{deep}}}"),
        deep.clone(),
        "{\"type\": \"event\", \"pid\": ".to_string(),
        "{\"no_type\": 1}".to_string(),
        "[1, 2]".to_string(),
    ];
    let text = format!("{header}\n{ev}\n{}\n{ev}\n{}\n", lines.join("\n"), footer(3));
    let rec = parse(&text).expect("damage is skipped");
    assert_eq!(rec.inputs.len(), 2);
    assert_eq!(rec.damage.lines, 5);
    let why: Vec<_> = rec.damage.first.iter().map(|d| (d.line, d.why.as_str())).collect();
    assert!(why[0].0 == 3 && why[0].1.starts_with("nested deeper"), "{why:?}");
    // An array at the top is refused before its depth is seen.
    assert!(why[1].0 == 4 && why[1].1.starts_with("not a record"), "{why:?}");
    assert!(why[2].0 == 5 && why[2].1.starts_with("not JSON"), "{why:?}");
    assert!(why[3].0 == 6 && why[3].1.contains("no \"type\""), "{why:?}");
    assert!(why[4].0 == 7 && why[4].1.starts_with("not a record"), "{why:?}");
    let inputs = rec.inputs();
    assert_eq!(inputs.loss.damaged_lines, 5);
    assert!(!inputs.loss.complete);
    // Well-formed lines of a later type, and JSON within serde's depth, are no damage.
    let shallow = format!("{}{}", "[".repeat(100), "]".repeat(100));
    let later = format!("{{\"type\":\"later\",\"v\":{shallow},\"w\":{{\"x\":[1]}}}}");
    let rec = parse(&format!("{header}\n{ev}\n{later}\n{}\n", footer(1))).expect("a later record");
    assert_eq!(rec.damage.lines, 0);
    // More events missing than damaged lines could have held.
    let e = parse(&format!("{header}\n{ev}\n[\n{}\n", footer(3))).unwrap_err();
    assert!(e.contains("lines are missing"), "{e}");
    // Only the first few are named.
    let many = vec!["x"; Damage::NAMED + 5].join("\n");
    let rec = parse(&format!("{header}\n{ev}\n{many}\n{}\n", footer(1))).expect("skipped");
    assert_eq!(rec.damage.lines, Damage::NAMED as u64 + 5);
    assert_eq!(rec.damage.first.len(), Damage::NAMED);
    // The header is no line to skip.
    assert!(parse(&format!("[\n{ev}\n{}\n", footer(1))).is_err());
}

/// The typed records write every input line of the recorded fixtures
/// (written by the recorder before it was derived) as it is: same fields,
/// same values (`tick`, `alive-check` and `setup-closed` carry only their
/// time; library op codes are this build's). The hand-made stand-ins (`make-standins.py`, which writes no
/// `op_code`) are left out.
#[test]
fn fixture_lines_are_written_as_read() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/recordings");
    let mut checked = 0;
    for f in std::fs::read_dir(&dir).expect("the fixtures").flatten() {
        let path = f.path();
        let name = path.to_string_lossy().into_owned();
        let made = std::fs::read_to_string(dir.join("make-standins.py")).expect("the stand-in maker");
        let stem = path
            .file_name()
            .map_or(String::new(), |f| f.to_string_lossy().replace(".gz", ""));
        let stem = stem.trim_end_matches(".rec");
        if !(name.ends_with(".rec") || name.ends_with(".rec.gz"))
            || made.contains(&format!("\"{stem}\""))
            || made.contains(&format!("\"{stem}.rec\""))
        {
            continue;
        }
        let text = crate::input::Input::open(&path)
            .and_then(|i| i.read_string())
            .expect("a fixture");
        for (n, l) in text.lines().enumerate().skip(1) {
            let mut v: Value = serde_json::from_str(l).expect("JSON");
            // Library op codes are table indices of the recording build;
            // this build writes its own (ops are read back by name).
            let rows = match v.get_mut("rows") {
                Some(Value::Array(rows)) => rows.iter_mut().collect(),
                _ => vec![&mut v],
            };
            for r in rows {
                if let Some(code) = r.get("op").and_then(Value::as_str).and_then(op_code) {
                    r["op_code"] = code.into();
                }
            }
            let again = match v["type"].as_str().expect("a type") {
                "event" => {
                    let e = serde_json::from_value::<EventLine>(v.clone()).unwrap().event().unwrap();
                    line(EventLine::TYPE, &EventLine::of(&e))
                }
                "aggregates" => {
                    let a: Aggregates = serde_json::from_value(v.clone()).unwrap();
                    line(Aggregates::TYPE, &Aggregates::of(a.t_ns.0, &a.rows().unwrap()))
                }
                "target" => line(Target::TYPE, &serde_json::from_value::<Target>(v.clone()).unwrap()),
                "duty" => line(Duty::TYPE, &serde_json::from_value::<Duty>(v.clone()).unwrap()),
                "process" | "env" | "sample" | "gone" | "space" => {
                    serde_json::to_value(serde_json::from_value::<Fact>(v.clone()).unwrap()).unwrap()
                }
                _ => continue,
            };
            assert_eq!(again, v, "{name} line {}", n + 1);
            checked += 1;
        }
    }
    assert!(checked > 1000, "{checked} lines");
}

/// A `trap-cost` line of a recording made before the single-stepped cost
/// was measured reads as an entry's cost; a new one carries it; a
/// `stepped` line names a process's single-stepped rows.
#[test]
fn trap_cost_and_stepped_lines() {
    let old = r#"{"type":"trap-cost","entry_ns":800.0,"pair_ns":1600.0}"#;
    let Some(Input::TrapCost(crate::sampling::TrapCost { stepped_ns, .. })) = reader::input(old, "trap-cost").unwrap()
    else {
        panic!("not a trap cost");
    };
    assert_eq!(stepped_ns, 800.0);
    let new = r#"{"type":"trap-cost","entry_ns":800.0,"pair_ns":1600.0,"stepped_ns":9400.0}"#;
    let Some(Input::TrapCost(crate::sampling::TrapCost { stepped_ns, .. })) = reader::input(new, "trap-cost").unwrap()
    else {
        panic!("not a trap cost");
    };
    assert_eq!(stepped_ns, 9400.0);
    let bad = r#"{"type":"trap-cost","entry_ns":800.0,"pair_ns":1600.0,"stepped_ns":-1}"#;
    assert!(reader::input(bad, "trap-cost").unwrap_err().contains("stepped_ns"));
    let s = r#"{"type":"stepped","pid":42,"rows":["cuMemcpyDtoHAsync"]}"#;
    let Some(Input::Stepped { pid, rows }) = reader::input(s, "stepped").unwrap() else {
        panic!("not a stepped line");
    };
    assert_eq!((pid, rows), (42, vec!["cuMemcpyDtoHAsync".to_string()]));
    assert!(reader::input(r#"{"type":"stepped","pid":-1,"rows":[]}"#, "stepped").is_err());
}

/// Totals read after a `duty` line that did not change get a `clock` line
/// (when they were read ends a short on phase for the estimates); other
/// unchanged totals get none; the line reads back as `Input::Clock`.
#[test]
fn unchanged_totals_after_a_duty_line_are_a_clock_line() {
    use crate::{output::StreamFile, stats::feed::Observer};
    let dir = std::env::temp_dir().join(format!("gdrtrace-clock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("clock.rec");
    let out = StreamFile::create("--record", &path).unwrap();
    let mut r = Recorder::create(out, &Header::now()).unwrap();
    let rows = vec![(
        AggKey {
            tgid: 7,
            op: 0,
            handle: 1,
        },
        AggValue { calls: 3, bytes: 24 },
    )];
    let duty = Input::Duty {
        on_us: 135,
        off_us: 0,
        rest: false,
        cpu: vec![(7, 100)],
    };
    r.input(&Input::Aggregates {
        t_ns: 1,
        rows: rows.clone(),
    });
    r.input(&duty);
    r.input(&Input::Aggregates {
        t_ns: 2,
        rows: rows.clone(),
    });
    r.input(&Input::Aggregates {
        t_ns: 3,
        rows: rows.clone(),
    });
    // Dropped, its buffer is written out.
    drop(r);
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let types: Vec<String> = text
        .lines()
        .skip(1)
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(types, ["aggregates", "duty", "clock"]);
    let clock = text.lines().find(|l| l.contains(r#""type":"clock""#)).unwrap();
    assert!(matches!(
        reader::input(clock, "clock").unwrap(),
        Some(Input::Clock { t_ns: 2 })
    ));
    let duty_line = text.lines().find(|l| l.contains(r#""type":"duty""#)).unwrap();
    assert!(matches!(
        reader::input(duty_line, "duty").unwrap(),
        Some(Input::Duty { cpu, .. }) if cpu == [(7, 100)]
    ));
}

/// `--record X.gz` writes gzip (the name says so, as `gzip -c > X.gz`
/// would): a recording written through the recorder to `.gz`, its
/// workloads line appended after the footer as a member of its own, reads
/// back (by the gzip magic bytes) to what was written; the same recording
/// to a plain name stays plain text.
#[test]
fn a_recording_named_gz_is_gzip() {
    use crate::{output::StreamFile, stats::feed::Observer};
    let rec = crate::cmd::replay::load(&crate::fixtures::dir().join("pin-churn.rec")).expect("fixture loads");
    let dir = std::env::temp_dir().join(format!("gdrtrace-gz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let workloads = vec![serde_json::json!({"workload": "pin-churn", "summary": {"iterations": 3}})];
    let mut written = Vec::new();
    for name in ["x.rec.gz", "x.rec"] {
        let path = dir.join(name);
        let mut r = Recorder::create(StreamFile::create("--record", &path).unwrap(), &rec.header).unwrap();
        for (input, facts) in &rec.inputs {
            r.input(input);
            for f in facts {
                Observer::fact(&mut r, f);
            }
        }
        let (out, done) = r.finish(&rec.footer);
        done.expect("written");
        finish_with_workloads(out, &workloads).expect("closed");
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.starts_with(&[0x1f, 0x8b]), name.ends_with(".gz"), "{name}");
        let back = crate::cmd::replay::load(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(back.inputs.len(), rec.inputs.len(), "{name}");
        assert_eq!(back.workloads, workloads, "{name}");
        written.push(bytes.len());
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(written[0] * 3 < written[1], "gzip is smaller: {written:?}");
}
