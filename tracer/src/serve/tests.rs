use super::*;

#[test]
fn budget_sheds_a_level_per_window_over_and_gives_it_back_under_half() {
    let t0 = Instant::now();
    let s = |n: u64| t0 + Duration::from_secs(n);
    let mut b = Budget::new(0.10, Duration::from_secs(5));
    assert_eq!(b.update(s(0), 0.0), None, "the first sample opens a window");
    assert_eq!(b.update(s(2), 5.0), None, "a window is not over before 5 s");
    assert_eq!(b.update(s(5), 1.0), Some(1), "0.2 CPU over a 0.1 budget");
    assert_eq!(b.update(s(10), 2.0), Some(2));
    assert_eq!(b.update(s(15), 3.0), None, "two levels at most");
    assert_eq!(b.update(s(20), 3.4), None, "0.08: under budget but not under half");
    assert_eq!(b.update(s(25), 3.5), Some(1), "0.02: one level back");
    assert_eq!(b.update(s(30), 3.5), Some(0));
    assert_eq!(b.update(s(35), 3.5), None);
}

#[test]
fn node_name_prefers_the_flag_then_the_environment() {
    assert_eq!(node_name(Some("n1")), "n1");
    assert!(!node_name(None).is_empty());
}
