use super::*;

fn key(pid: u32) -> RowKey {
    (pid, "ncclAllReduce".into(), 0x1)
}

/// Drives `e` for `ticks` intervals of 250 ms with `rate(i)` calls per
/// interval made by process 7, counting in the intervals `on(i)` says;
/// returns (made, counted).
fn drive(
    e: &mut Estimator,
    ticks: u32,
    rate: impl Fn(u32) -> u64,
    on: impl Fn(u32) -> bool,
    mut counted: u64,
) -> (u64, u64) {
    let mut made = 0;
    let rows = |n: u64| Rows::from([(key(7), (n, n * 8192))]);
    for i in 0..ticks {
        let (on_us, off_us) = if on(i) { (250_000, 0) } else { (0, 250_000) };
        e.interval(&rows(counted), on_us, off_us, &Cpu::new(), |_| true);
        made += rate(i);
        if on(i) {
            counted += rate(i);
        }
        e.counts(&rows(counted));
    }
    (made, counted)
}

/// A process idles through its set-up with the probes open (no calls),
/// then calls 10,000 times a tick; the cycle closes the probes for 39
/// of every 40 ticks. Its estimate follows the calls it made, which one
/// scale factor over its traced time would not.
/// One on phase of 250 ms that counted `n` calls of `key(7)`, then a
/// 250 ms gap; returns the estimate after it and whether it is a lower
/// bound.
fn after_one_gap(e: &mut Estimator, n: u64) -> (u64, bool) {
    let rows = |n: u64| Rows::from([(key(7), (n, 0))]);
    e.interval(&rows(0), 250_000, 0, &Cpu::new(), |_| true);
    e.counts(&rows(n));
    e.interval(&rows(n), 0, 250_000, &Cpu::new(), |_| true);
    e.counts(&rows(n));
    (e.estimate(&key(7), (n, 0)).0, e.lower_bound(&key(7)))
}

/// Entry 1 us, pair 2 us, a single-stepped entry 10 us; `stepped`:
/// process 7's rows probed on one.
fn costed(stepped: &[&str]) -> Estimator {
    let mut e = Estimator::default();
    e.trap_cost(TrapCost {
        entry_ns: 1000.0,
        pair_ns: 2000.0,
        stepped_ns: 10_000.0,
    });
    e.stepped(7, stepped.iter().map(|s| s.to_string()).collect());
    // Another process's stepped row is not process 7's.
    e.stepped(8, vec!["ncclAllReduce".into()]);
    e
}

/// A row whose first instruction is single-stepped pays the step on
/// every trap: 10,000 calls of 10 us traps are 40% of 250 ms, and the
/// untraced rate is the counted one over the other 60%.
#[test]
fn a_single_stepped_row_is_corrected_by_its_own_cost() {
    let mut plain = costed(&[]);
    let mut stepped = costed(&["ncclAllReduce"]);
    let (p, p_bound) = after_one_gap(&mut plain, 10_000);
    let (st, st_bound) = after_one_gap(&mut stepped, 10_000);
    // 10,000 / 0.96 and 10,000 / 0.6 in the gap.
    assert!((20_400..=20_430).contains(&p), "{p}");
    assert!((26_660..=26_670).contains(&st), "{st}");
    assert!(!p_bound && !st_bound);
}

/// Calls that were mostly traps while counted give a rate that says
/// only how fast the traps ran: the estimate is marked a lower bound.
#[test]
fn a_trap_bound_rate_gives_a_lower_bound() {
    let mut e = costed(&["ncclAllReduce"]);
    // 20,000 traps of 10 us: 200 ms of the 250.
    let (calls, bound) = after_one_gap(&mut e, 20_000);
    assert!(bound, "{calls}");
    assert_eq!(calls, 60_000, "the rate at the most trap share told, 1/(1-0.5)");
    // No cost known: nothing says the calls were traps.
    let mut e = Estimator::default();
    assert!(!after_one_gap(&mut e, 20_000).1);
}

/// A process kept off the CPU by others: 12,000 traps of 10 us are 120
/// ms of the 250 ms it counted, under half, but all of the 125 ms it
/// ran. Judged over its CPU time, its estimate is a lower bound; the
/// correction stays the one over the wall time. A process whose CPU
/// time was not read is judged over the wall time alone.
#[test]
fn traps_that_took_most_of_a_starved_process_s_cpu_time_give_a_lower_bound() {
    let run = |cpu: &[(u32, u64)]| {
        let mut e = costed(&["ncclAllReduce"]);
        let cpu: Cpu = cpu.iter().copied().collect();
        let rows = |n: u64| Rows::from([(key(7), (n, 0))]);
        e.interval(&rows(0), 250_000, 0, &cpu, |_| true);
        e.counts(&rows(12_000));
        e.interval(&rows(12_000), 0, 250_000, &Cpu::new(), |_| true);
        e.counts(&rows(12_000));
        (e.estimate(&key(7), (12_000, 0)).0, e.lower_bound(&key(7)))
    };
    let (wall, wall_bound) = run(&[]);
    let (starved, starved_bound) = run(&[(7, 125_000)]);
    assert!(!wall_bound, "{wall}");
    assert!(starved_bound, "{starved}");
    assert_eq!(starved, wall, "the same correction");
    // Another process's CPU time says nothing of process 7's.
    assert!(!run(&[(8, 125_000)]).1);
    // Nor does a process that ran most of the time.
    assert!(!run(&[(7, 249_000)]).1);
    // Over a short on phase a CPU clock is told to a tick at best: 3 ms
    // that read 64 us of CPU judge nothing.
    let mut e = costed(&[]);
    let rows = |n: u64| Rows::from([(key(7), (n, 0))]);
    e.interval(&rows(0), 3_000, 0, &Cpu::from([(7, 64)]), |_| true);
    e.counts(&rows(100));
    e.interval(&rows(100), 0, 100_000, &Cpu::new(), |_| true);
    e.counts(&rows(100));
    assert!(!e.lower_bound(&key(7)));
}

/// The CPU time of an on phase of several intervals is summed only for
/// the processes read in each of them.
#[test]
fn cpu_time_is_summed_over_the_intervals_that_read_it() {
    let a: Cpu = [(7, 100), (8, 50)].into();
    let b: Cpu = [(7, 20)].into();
    assert_eq!(cpu_over([&a, &b].into_iter()), Cpu::from([(7, 120)]));
    assert_eq!(cpu_over(std::iter::empty::<&Cpu>()), Cpu::new());
}

/// The trap cost measured only after a trap-bound on phase ended (the
/// calibration takes a second or two, a loop over budget from its start
/// does not wait): the estimates are those of a cost known from the
/// start, corrected and marked, and the estimator goes on from there.
#[test]
fn a_trap_cost_that_comes_late_judges_what_came_before() {
    let cost = TrapCost {
        entry_ns: 1000.0,
        pair_ns: 2000.0,
        stepped_ns: 10_000.0,
    };
    let feed = |e: &mut Estimator, late: bool| {
        let rows = |n: u64| Rows::from([(key(7), (n, n))]);
        e.stepped(7, vec!["ncclAllReduce".into()]);
        e.interval(&rows(0), 250_000, 0, &Cpu::new(), |_| true);
        e.counts(&rows(20_000));
        e.interval(&rows(20_000), 0, 250_000, &Cpu::new(), |_| true);
        e.counts(&rows(20_000));
        if late {
            e.trap_cost(cost);
        }
        e.interval(&rows(20_000), 0, 250_000, &Cpu::new(), |_| true);
        e.counts(&rows(20_000));
    };
    let mut early = Estimator::default();
    early.trap_cost(cost);
    feed(&mut early, false);
    let mut late = Estimator::default();
    feed(&mut late, true);
    let mut never = Estimator::default();
    feed(&mut never, false);
    let got = |e: &Estimator| (e.estimate(&key(7), (20_000, 20_000)).0, e.lower_bound(&key(7)));
    assert_eq!(got(&early), (20_000 + 80_000, true), "two gaps at 40,000 a tick");
    assert_eq!(got(&late), got(&early));
    assert_eq!(
        got(&never),
        (20_000 + 40_000, false),
        "nothing says the calls were traps"
    );
}

#[test]
fn off_phases_take_the_rates_of_the_on_phases_around_them() {
    let mut e = Estimator::default();
    let (_, counted) = drive(&mut e, 80, |_| 0, |_| true, 0);
    let (made, counted) = drive(&mut e, 161, |_| 10_000, |i| i % 40 == 0, counted);
    let (calls, bytes) = e.estimate(&key(7), (counted, counted * 8192));
    assert_eq!(counted, 50_000);
    let err = (calls as f64 - made as f64).abs() / made as f64;
    assert!(err < 0.01, "estimate {calls} of {made} calls made");
    assert_eq!(bytes, calls * 8192);
}

/// Calls that begin in the last-but-one tick of a long on phase: the
/// gap after it takes the rate of the last tick, a little under 250 ms
/// long as ticks often are, not a mean with the part-idle tick.
#[test]
fn the_gap_after_a_rise_takes_the_last_tick() {
    let mut e = Estimator::default();
    let rows = |n: u64| Rows::from([(key(7), (n, 0))]);
    for (start, on, end) in [(0, 250_000, 0), (0, 250_100, 3000), (3000, 249_900, 15_000)] {
        e.interval(&rows(start), on, 0, &Cpu::new(), |_| true);
        e.counts(&rows(end));
    }
    e.interval(&rows(15_000), 0, 1_000_000, &Cpu::new(), |_| true);
    e.counts(&rows(15_000));
    let extra = e.estimate(&key(7), (15_000, 0)).0 - 15_000;
    assert!(
        (47_000..=49_000).contains(&extra),
        "{extra}: 1 s at 12,000 calls a tick"
    );
}

/// A rate that doubles between two on phases: the gap between them is
/// estimated at the mean; the open gap after the last at its rate.
#[test]
fn a_gap_takes_the_mean_of_the_rates_around_it() {
    let mut e = Estimator::default();
    let rows = |n: u64| Rows::from([(key(7), (n, 0))]);
    e.interval(&rows(0), 250_000, 0, &Cpu::new(), |_| true);
    e.counts(&rows(1000));
    for _ in 0..4 {
        e.interval(&rows(1000), 0, 250_000, &Cpu::new(), |_| true);
        e.counts(&rows(1000));
    }
    // Open gap: at the rate before it, 1,000 a tick.
    assert_eq!(e.estimate(&key(7), (1000, 0)).0, 5000);
    e.interval(&rows(1000), 250_000, 0, &Cpu::new(), |_| true);
    e.counts(&rows(3000));
    // Closed: 4 ticks at the mean of 1,000 and 2,000.
    assert_eq!(e.estimate(&key(7), (3000, 0)).0, 3000 + 6000);
}

/// A process that exited in a gap gets the rate before it for the part
/// of the gap it lived through, at most a second of it; a row whose
/// communicator's end was seen, the mean of the rate before the gap and
/// none up to the end (its calls stopped before it), and nothing for
/// the time after it.
#[test]
fn rows_that_end_in_a_gap() {
    let mut e = Estimator::default();
    let rows = |n: u64| Rows::from([(key(1), (n, n)), (key(2), (n, n)), (key(3), (n, n))]);
    e.interval(&rows(0), 250_000, 0, &Cpu::new(), |_| true);
    e.counts(&rows(1000));
    e.interval(&rows(1000), 0, 250_000, &Cpu::new(), |_| true);
    e.counts(&rows(1000));
    // Process 3's communicator ends; process 2 exits in this interval.
    e.row_ended(3, 0x1);
    e.interval(&rows(1000), 0, 250_000, &Cpu::new(), |pid| pid != 2);
    e.counts(&rows(1000));
    e.exited(2);
    assert_eq!(
        e.closed(&key(2), (1000, 1000)),
        (2000, 2000),
        "the interval it was seen alive in, at the rate before"
    );
    e.interval(&rows(1000), 0, 250_000, &Cpu::new(), |pid| pid == 1);
    e.counts(&rows(1000));
    e.exited(3);
    assert_eq!(e.closed(&key(3), (1000, 1000)), (1500, 1500), "one tick up to its end");
    e.interval(&rows(1000), 250_000, 0, &Cpu::new(), |pid| pid == 1);
    e.counts(&Rows::from([
        (key(1), (2000, 2000)),
        (key(2), (1000, 1000)),
        (key(3), (1000, 1000)),
    ]));
    assert_eq!(e.estimate(&key(1), (2000, 2000)), (5000, 5000));
    assert_eq!(e.closed(&key(1), (2000, 2000)), (5000, 5000));
    assert_eq!(e.estimate(&key(2), (1000, 1000)), (2000, 2000));
    assert_eq!(e.estimate(&key(3), (1000, 1000)), (1500, 1500));
    e.forget(1);
    assert_eq!(e.estimate(&key(1), (2000, 2000)), (2000, 2000));
}

/// A long gap that ends in the process's exit counts one second at the
/// rate before it, not the whole gap: nothing says the calls went on.
#[test]
fn a_long_last_gap_is_capped() {
    let mut e = Estimator::default();
    let rows = |n: u64| Rows::from([(key(4), (n, n))]);
    e.interval(&rows(0), 250_000, 0, &Cpu::new(), |_| true);
    e.counts(&rows(1000));
    for _ in 0..12 {
        e.interval(&rows(1000), 0, 250_000, &Cpu::new(), |_| true);
        e.counts(&rows(1000));
    }
    e.exited(4);
    assert_eq!(e.closed(&key(4), (1000, 1000)), (5000, 5000), "1 s at 4,000/s");
}

/// A row whose first call came late in the tick that closed its probes
/// (a loop that began 3.5 ms before the beat): its process exits in the
/// gap after it, whose estimate carries that tick's rate on alone, a
/// rate mostly of the time before the row began: a lower bound. The
/// same row begun early in the tick, or a gap closed by the rate after
/// it too, is not marked.
#[test]
fn a_row_begun_late_in_the_tick_before_its_exit_is_a_lower_bound() {
    const T0: u64 = 1_000_000_000_000;
    let run = |began_ns: u64, exits: bool| {
        let mut e = Estimator::default();
        let rows = |n: u64| Rows::from([(key(5), (n, n))]);
        e.row_began(&key(5), began_ns);
        e.interval(&rows(0), 252_000, 0, &Cpu::new(), |_| true);
        e.clock(T0 + 252_000_000);
        e.counts(&rows(133));
        e.interval(&rows(133), 0, 11_000, &Cpu::new(), |_| true);
        e.clock(T0 + 263_000_000);
        e.counts(&rows(133));
        if exits {
            e.exited(5);
        } else {
            e.interval(&rows(133), 50_000, 0, &Cpu::new(), |_| true);
            e.clock(T0 + 313_000_000);
            e.counts(&rows(1133));
        }
        (e.estimate(&key(5), (133, 0)).0, e.lower_bound(&key(5)))
    };
    let (late, late_bound) = run(T0 + 248_500_000, true);
    assert!(late_bound, "{late}");
    let (early, early_bound) = run(T0 + 1_000_000, true);
    assert!(!early_bound, "{early}");
    assert_eq!(late, early, "the same estimate, only marked");
    assert!(!run(T0 + 248_500_000, false).1, "closed by the rate after the gap too");
}

/// A loop that began 96 ms into the 251 ms tick that closed its probes
/// (its first call's event says when) made its calls over the 155 ms
/// since: 100,000 traps of 1 us are 65% of that time, and its estimate
/// a lower bound; over the whole tick they would be 40%, and not.
#[test]
fn a_row_that_began_in_the_tick_is_judged_over_the_time_since() {
    const T0: u64 = 1_000_000_000_000;
    let run = |began_ns: u64| {
        let mut e = costed(&[]);
        let rows = |n: u64| Rows::from([(key(7), (n, n))]);
        e.row_began(&key(7), began_ns);
        e.interval(&rows(0), 251_000, 0, &Cpu::new(), |_| true);
        e.clock(T0 + 251_000_000);
        e.counts(&rows(100_000));
        e.interval(&rows(100_000), 0, 100_000, &Cpu::new(), |_| true);
        e.clock(T0 + 351_000_000);
        e.counts(&rows(100_000));
        e.exited(7);
        (e.estimate(&key(7), (100_000, 0)).0, e.lower_bound(&key(7)))
    };
    let (since, since_bound) = run(T0 + 96_000_000);
    assert!(since_bound, "{since}");
    // 100 ms at 100,000 calls in 155 ms, at most twice that untraced.
    assert_eq!(since, 100_000 + 129_032);
    let (whole, whole_bound) = run(T0);
    assert!(!whole_bound, "{whole}");
    assert_eq!(whole, 100_000 + 66_225, "100,000 in 251 ms, over the 60% not in traps");
}

/// The same loop, its process alive to the estimator (the tick it
/// exited in still counts it) when a short on phase of `serve` comes
/// 40 ms after the beat that closed its probes and finds none of its
/// calls. The interval of that phase (40 ms uncounted, then 1 ms
/// counted) ends the on phase before it; the loop, seen to exit before
/// the phase, has its gap closed as one that exited in it (the rate
/// before alone, a lower bound), not at the mean of that rate and the
/// phase's none. Seen to exit only after the phase, the phase's rate is
/// its own.
#[test]
fn an_on_phase_after_the_exit_closes_no_gap_at_its_rate() {
    const T0: u64 = 1_000_000_000_000;
    let run = |seen_before_phase: bool| {
        let mut e = Estimator::default();
        let rows = |n: u64| Rows::from([(key(5), (n, n))]);
        e.row_began(&key(5), T0 + 248_500_000);
        e.interval(&rows(0), 252_000, 0, &Cpu::new(), |_| true);
        e.clock(T0 + 252_000_000);
        e.counts(&rows(133));
        if seen_before_phase {
            e.gone(5);
        }
        e.interval(&rows(133), 1000, 40_000, &Cpu::new(), |_| true);
        e.clock(T0 + 293_000_000);
        e.counts(&rows(133));
        // The rest of the tick after the phase's counts were read.
        e.interval(&rows(133), 0, 5, &Cpu::new(), |_| true);
        if !seen_before_phase {
            e.gone(5);
        }
        e.counts(&rows(133));
        e.exited(5);
        (e.estimate(&key(5), (133, 0)).0, e.lower_bound(&key(5)))
    };
    let (gone, gone_bound) = run(true);
    assert!(gone_bound, "{gone}");
    // 133 calls over 252 ms, carried on over the 40 ms before the phase.
    assert_eq!(gone, 133 + 21, "the rate before, alone");
    let (seen_late, late_bound) = run(false);
    assert!(!late_bound, "{seen_late}");
    assert_eq!(seen_late, 133 + 11, "the mean of the rate before and the phase's none");
}

/// The closed estimate never includes an open gap, so it never goes
/// down when the gap closes at a lower rate than the one before it.
#[test]
fn closed_estimates_only_grow() {
    let mut e = Estimator::default();
    let rows = |n: u64| Rows::from([(key(7), (n, n))]);
    let mut last = 0;
    let mut counted = 0;
    for (i, on) in [true, false, false, true, false, true, true, false, false, false, true]
        .iter()
        .enumerate()
    {
        let rate = if i < 5 { 1000 } else { 10 };
        let (on_us, off_us) = if *on { (250_000, 0) } else { (0, 250_000) };
        e.interval(&rows(counted), on_us, off_us, &Cpu::new(), |_| true);
        if *on {
            counted += rate;
        }
        e.counts(&rows(counted));
        let now = e.closed(&key(7), (counted, counted)).0;
        assert!(now >= last, "tick {i}: {now} < {last}");
        assert!(e.estimate(&key(7), (counted, counted)).0 >= now);
        last = now;
    }
}

/// Totals read between two intervals (a scrape) count in the interval
/// they fall in.
#[test]
fn totals_read_between_intervals_are_not_lost() {
    let rows = |n: u64| Rows::from([(key(7), (n, 0))]);
    let mut e = Estimator::default();
    // Each tick ends an interval, then brings its totals.
    e.interval(&rows(0), 250_000, 0, &Cpu::new(), |_| true);
    e.counts(&rows(1000));
    // A scrape half-way through the next interval reads the totals.
    e.counts(&rows(1500));
    e.interval(&rows(1500), 250_000, 0, &Cpu::new(), |_| true);
    e.counts(&rows(2000));
    for _ in 0..2 {
        e.interval(&rows(2000), 0, 250_000, &Cpu::new(), |_| true);
        e.counts(&rows(2000));
    }
    assert_eq!(
        e.estimate(&key(7), (2000, 0)).0,
        2000 + 2 * 1000,
        "the open gap at the last on tick's 1,000 calls, half of them read by the scrape"
    );
}

/// Counts that arrive only with the next interval (a replay whose
/// totals did not change) or at the report (`settle`) give the same.
#[test]
fn late_counts_are_the_same_counts() {
    let rows = |n: u64| Rows::from([(key(7), (n, 0))]);
    let mut live = Estimator::default();
    let mut late = Estimator::default();
    for (n, on, off) in [
        (0, 250_000, 0),
        (500, 0, 250_000),
        (500, 0, 250_000),
        (500, 200_000, 50_000),
    ] {
        live.interval(&rows(n), on, off, &Cpu::new(), |_| true);
        live.counts(&rows(n + if on > 0 { 500 } else { 0 }));
        late.interval(&rows(n), on, off, &Cpu::new(), |_| true);
        if on > 0 {
            late.counts(&rows(n + 500));
        }
    }
    late.settle(&rows(1000));
    assert_eq!(live.estimate(&key(7), (1000, 0)), late.estimate(&key(7), (1000, 0)));
}
