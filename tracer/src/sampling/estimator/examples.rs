//! The worked examples of docs/sampling.md ("What the estimator reports"):
//! each drives the estimator with an on/off timeline and its counts, as the
//! tracing loop does, and checks the figure the page quotes.
use super::*;

/// Process 7's all-reduce row.
fn row() -> RowKey {
    (7, "ncclAllReduce".into(), 0x1)
}

/// The row's cumulative count as the kernel holds it.
fn rows(n: u64) -> Rows {
    Rows::from([(row(), (n, 0))])
}

/// Feeds one interval: `on_ms` counted then `off_ms` not (the page's
/// timelines put the off part first, as the tracing loop reports it), the
/// row's count going from `before` to `after`.
fn interval(e: &mut Estimator, on_ms: u64, off_ms: u64, before: u64, after: u64) {
    e.interval(&rows(before), on_ms * 1000, off_ms * 1000, &Cpu::new(), |_| true);
    e.counts(&rows(after));
}

/// Example 1: probes on all the time. Nothing is estimated: the report is
/// the count, exact.
#[test]
fn example_always_on_is_the_count() {
    let mut e = Estimator::default();
    interval(&mut e, 250, 0, 0, 1_000);
    interval(&mut e, 250, 0, 1_000, 2_000);
    assert_eq!(e.estimate(&row(), (2_000, 0)).0, 2_000);
    assert_eq!(e.closed(&row(), (2_000, 0)).0, 2_000);
    assert!(!e.lower_bound(&row()));
}

/// Example 2: on 250 ms (1,000 calls: 4 a millisecond), off 500 ms, on
/// 250 ms (3,000 calls: 12 a millisecond). The gap is estimated at the
/// mean of the rates around it, 8 a millisecond: 4,000 calls, 8,000 in all.
#[test]
fn example_a_gap_takes_the_mean_of_the_rates_around_it() {
    let mut e = Estimator::default();
    interval(&mut e, 250, 0, 0, 1_000);
    // While the gap is open, it is carried at the rate before it.
    interval(&mut e, 0, 500, 1_000, 1_000);
    assert_eq!(e.estimate(&row(), (1_000, 0)).0, 1_000 + 2_000);
    assert_eq!(e.closed(&row(), (1_000, 0)).0, 1_000, "an open gap is not closed");
    interval(&mut e, 250, 0, 1_000, 4_000);
    assert_eq!(e.estimate(&row(), (4_000, 0)).0, 8_000);
    assert_eq!(e.closed(&row(), (4_000, 0)).0, 8_000);
    assert!(!e.lower_bound(&row()));
}

/// Example 3: on 250 ms (2,500 calls: 10 a millisecond), then off for 3 s
/// in which the process exits. Its gap is estimated at the rate before it
/// for at most `TAIL_US` (1 s): 10,000 calls, 12,500 in all.
#[test]
fn example_a_process_that_exits_in_a_gap_is_carried_for_a_second() {
    let mut e = Estimator::default();
    interval(&mut e, 250, 0, 0, 2_500);
    interval(&mut e, 0, 3_000, 2_500, 2_500);
    e.exited(7);
    assert_eq!(TAIL_US, 1_000_000);
    assert_eq!(e.closed(&row(), (2_500, 0)).0, 12_500);
    assert!(!e.lower_bound(&row()));
}

/// Example 4: the trap cost is known (10 us a call for this row), and on
/// 250 ms the row counted 20,000 calls: 200 ms of traps, more than
/// `MAX_TRAP_SHARE` (half) of the time. The rate is corrected by at most
/// 1/(1 - 0.5) = 2 (160 a millisecond), the 250 ms gap after it estimated
/// at that, 40,000 calls, 60,000 in all, and marked a lower bound: the
/// untraced rate is higher than can be told.
#[test]
fn example_a_trap_bound_rate_gives_a_lower_bound() {
    let mut e = Estimator::default();
    e.trap_cost(TrapCost {
        entry_ns: 10_000.0,
        pair_ns: 20_000.0,
        stepped_ns: 10_000.0,
    });
    interval(&mut e, 250, 0, 0, 20_000);
    interval(&mut e, 0, 250, 20_000, 20_000);
    assert_eq!(e.estimate(&row(), (20_000, 0)).0, 60_000);
    assert!(e.lower_bound(&row()));
}

/// Example 5: process 7 copies (a sampled row) and makes a few large GETs
/// (`ucp_get_nbx`, an exact row). On 250 ms, off 500 ms, on 250 ms as in
/// example 2: the copies come to 8,000 as there, the GETs are their count,
/// 6, the 3 made in the off phase included. Then the GET op joins the
/// sampled rows: off 500 ms, on 250 ms with 250 GETs (1 a millisecond).
/// Its counts before include calls of off phases, so its gap takes the
/// rate after it alone: 500 estimated, 756 in all.
#[test]
fn example_an_exact_row_is_its_count_until_it_joins_the_cycle() {
    let mut e = Estimator::default();
    let get = || (7, "ucp_get_nbx".to_string(), 0x2);
    let both = |copies: u64, gets: u64| Rows::from([(row(), (copies, 0)), (get(), (gets, 0))]);
    let step = |e: &mut Estimator, on_ms: u64, off_ms: u64, before: Rows, after: Rows| {
        e.interval(&before, on_ms * 1000, off_ms * 1000, &Cpu::new(), |_| true);
        e.counts(&after);
    };
    e.exact_rows(vec!["ucp_get_nbx".into()]);
    step(&mut e, 250, 0, both(0, 0), both(1_000, 2));
    step(&mut e, 0, 500, both(1_000, 2), both(1_000, 5));
    step(&mut e, 250, 0, both(1_000, 5), both(4_000, 6));
    assert_eq!(e.estimate(&row(), (4_000, 0)).0, 8_000);
    assert_eq!(e.estimate(&get(), (6, 0)).0, 6, "counted through the off phase");
    e.exact_rows(Vec::new());
    step(&mut e, 0, 500, both(4_000, 6), both(4_000, 6));
    step(&mut e, 250, 0, both(4_000, 6), both(7_000, 256));
    assert_eq!(e.closed(&get(), (256, 0)).0, 756);
}
