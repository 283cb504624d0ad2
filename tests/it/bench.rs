//! The benchmarks' own correctness (not their speed: timings are never
//! asserted here). Each one checks that the tracer saw every call the
//! benchmark made; these tests hold them to it.
use integration_tests::{can_trace, run, stderr, stdout};

fn json_line(o: &std::process::Output) -> serde_json::Value {
    let out = stdout(o);
    let line = out
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line; stdout {out:?}, stderr {:?}", stderr(o)));
    serde_json::from_str(line).expect("bench JSON")
}

#[test]
fn uprobe_hit_counts_every_probed_call_in_the_kernel() {
    if !can_trace("uprobe_hit_counts_every_probed_call_in_the_kernel") {
        return;
    }
    let o = run(&["bench", "uprobe-hit", "--calls", "20000", "--rounds", "3"]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let v = json_line(&o);
    // 3 rounds of 20,000 calls plus the 2,001 warm-up calls.
    assert_eq!(v["counted_calls"], 62_001, "{v}");
    // 2048 float32 per call: 8 KiB each.
    assert_eq!(v["counted_bytes"], 62_001u64 * 8192, "{v}");
    assert!(v["ns_per_hit"].as_f64().is_some_and(|x| x.is_finite()), "{v}");
}

#[test]
fn uprobe_hit_rejects_zero_calls() {
    let o = run(&["bench", "uprobe-hit", "--calls", "0"]);
    assert_eq!(o.status.code(), Some(2), "stderr: {}", stderr(&o));
    assert!(stderr(&o).contains("--calls and --rounds"), "{}", stderr(&o));
}

/// `bench trap-cost`: the three figures a trace corrects by; with
/// `--evict-kib`, the medians beside them (the values are not judged:
/// timings are never asserted here).
#[test]
fn trap_cost_gives_every_figure() {
    if !can_trace("trap_cost_gives_every_figure") {
        return;
    }
    for args in [
        &["bench", "trap-cost"][..],
        &["bench", "trap-cost", "--evict-kib", "64"],
    ] {
        let o = run(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let v = json_line(&o);
        for k in ["entry_ns", "pair_ns", "stepped_ns"] {
            assert!(
                v[k].as_f64().is_some_and(|x| x.is_finite() && x >= 0.0),
                "{args:?}: {v}"
            );
        }
        let evicting = args.len() > 2;
        assert_eq!(v["evict_kib"].as_u64(), evicting.then_some(64), "{v}");
        assert_eq!(v["median"]["pair_ns"].is_f64(), evicting, "{v}");
    }
}

#[test]
fn pipeline_delivers_every_event_at_a_modest_rate() {
    if !can_trace("pipeline_delivers_every_event_at_a_modest_rate") {
        return;
    }
    let o = run(&[
        "bench",
        "pipeline",
        "--calls",
        "50000",
        "--rate",
        "50000",
        "--threads",
        "2",
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let v = json_line(&o);
    assert_eq!(v["delivered"], 50_000, "{v}");
    assert_eq!(v["ringbuf_drops"], 0, "{v}");
    assert_eq!(v["complete"], true, "{v}");
}
