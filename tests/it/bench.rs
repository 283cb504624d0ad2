//! The benchmarks' own correctness (not their speed: timings are never
//! asserted here). Each one checks that the tracer saw every call the
//! benchmark made; these tests hold them to it.
use gdrtrace::cmd::bench::{PipelineResult, TrapCostResult, UprobeHitResult};
use integration_tests::{can_trace, parse_as, run, stderr, stdout};

/// The JSON line a `bench` command prints last, into its result type.
fn json_line<T: serde::de::DeserializeOwned>(o: &std::process::Output) -> T {
    let out = stdout(o);
    let line = out
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line; stdout {out:?}, stderr {:?}", stderr(o)));
    parse_as("bench JSON", line)
}

#[test]
fn uprobe_hit_counts_every_probed_call_in_the_kernel() {
    if !can_trace("uprobe_hit_counts_every_probed_call_in_the_kernel") {
        return;
    }
    let o = run(&["bench", "uprobe-hit", "--calls", "20000", "--rounds", "3"]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let v: UprobeHitResult = json_line(&o);
    // 3 rounds of 20,000 calls plus the 2,001 warm-up calls.
    assert_eq!(v.counted_calls, 62_001, "{v:?}");
    // 2048 float32 per call: 8 KiB each.
    assert_eq!(v.counted_bytes, 62_001u64 * 8192, "{v:?}");
    assert!(v.ns_per_hit.is_finite(), "{v:?}");
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
        let v: TrapCostResult = json_line(&o);
        for x in [v.entry_ns, v.pair_ns, v.stepped_ns] {
            assert!(x.is_finite() && x >= 0.0, "{args:?}: {v:?}");
        }
        let evicting = args.len() > 2;
        assert_eq!(v.evict_kib, evicting.then_some(64), "{v:?}");
        assert_eq!(v.median.is_some(), evicting, "{v:?}");
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
    let v: PipelineResult = json_line(&o);
    assert_eq!(v.delivered, 50_000, "{v:?}");
    assert_eq!(v.ringbuf_drops, 0, "{v:?}");
    assert!(v.complete, "{v:?}");
}
