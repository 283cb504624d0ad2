use super::*;
use tracer_common::kind;

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
    let v = event_json(&e);
    assert_eq!(v["op"], "ibv_reg_mr");
    assert_eq!(v["args"][1], "0x7f0000001000");
    let back = event_of(&v).unwrap();
    assert_eq!(format!("{back:?}"), format!("{e:?}"));
    assert_eq!(num(&Value::from("-14")), Some((-14i64) as u64));
    assert_eq!(signed(-14), Value::from(-14));
    assert!(event_of(&serde_json::json!({"kind": "call", "op": "no_such_op", "pid": 1, "start_ns": 1})).is_err());
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
}
