//! Flags whose value the tool moves to the nearest one it supports (an
//! `--interval` shorter than the sampling tick, `--threads 0`): each says
//! so once on stderr, `--interval 1ms raised to 250ms: the smallest
//! interval`, and the command goes on with the value it uses. A value the
//! tool cannot use at all is refused instead (exit 2).

/// `given`, or `min` when it is smaller (said on stderr: `why` names `min`,
/// e.g. "the smallest interval").
pub fn at_least<T: PartialOrd + Copy>(flag: &str, given: T, min: T, show: impl Fn(T) -> String, why: &str) -> T {
    if given < min {
        errln!("gdrtrace: note: {}", line(flag, &show(given), &show(min), true, why));
        min
    } else {
        given
    }
}

/// `given`, or `max` when it is larger (said on stderr).
pub fn at_most<T: PartialOrd + Copy>(flag: &str, given: T, max: T, show: impl Fn(T) -> String, why: &str) -> T {
    if given > max {
        errln!("gdrtrace: note: {}", line(flag, &show(given), &show(max), false, why));
        max
    } else {
        given
    }
}

/// The note: `--interval 1ms raised to 250ms: the smallest interval`.
pub fn line(flag: &str, given: &str, to: &str, raised: bool, why: &str) -> String {
    let verb = if raised { "raised" } else { "lowered" };
    format!("{flag} {given} {verb} to {to}: {why}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_in_range_are_kept_and_others_moved() {
        let n = |v: u32| v.to_string();
        assert_eq!(at_least("--threads", 3, 1, n, "the fewest threads"), 3);
        assert_eq!(at_least("--threads", 0, 1, n, "the fewest threads"), 1);
        assert_eq!(at_most("--wakeup-bytes", 10, 8, n, "a quarter of the ring buffer"), 8);
        assert_eq!(at_most("--wakeup-bytes", 8, 8, n, "a quarter of the ring buffer"), 8);
        assert_eq!(
            line("--interval", "1ms", "250ms", true, "the smallest interval"),
            "--interval 1ms raised to 250ms: the smallest interval"
        );
        assert_eq!(line("--x", "9", "8", false, "the most"), "--x 9 lowered to 8: the most");
    }
}
