//! Parsing of the durations and sizes given on the command line, bounded:
//! a value out of range is a one-line error, never a panic (a float too
//! large for `Duration` used to be one).
use std::time::Duration;

/// The longest duration accepted (`--duration`, `--interval`): a year.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// The shortest: the tracer's timers tick in milliseconds.
pub const MIN_DURATION: Duration = Duration::from_millis(1);

/// Parses `500ms`, `10s`, `2m`, `1h`, `1d` or plain seconds (decimals
/// allowed), between [`MIN_DURATION`] and [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((s, "s"), |i| s.split_at(i));
    let v: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration '{s}' (use e.g. 500ms, 10s, 2m)"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" | "" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        "d" => v * 86400.0,
        _ => return Err(format!("invalid duration unit in '{s}' (use ms, s, m, h or d)")),
    };
    if secs.is_nan() || secs <= 0.0 {
        return Err(format!("duration must be positive: '{s}'"));
    }
    // Compared as floats before converting: Duration::from_secs_f64 panics
    // on values it cannot hold.
    if secs > MAX_DURATION.as_secs_f64() {
        return Err(format!("duration '{s}' is too long (at most 365d)"));
    }
    if secs < MIN_DURATION.as_secs_f64() {
        return Err(format!("duration '{s}' is too short (at least 1ms)"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses a byte size: a plain number, or one with a K, M or G suffix
/// (powers of 1024; `KiB`, `KB`, `k` are accepted the same). Must be > 0
/// and fit in 64 bits.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid size '{s}' (use e.g. 4096, 64K, 16M, 1G)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(format!("invalid size unit in '{s}' (use K, M or G)")),
    };
    let v = n.checked_mul(mult).ok_or_else(|| format!("size '{s}' is too large"))?;
    if v == 0 {
        return Err(format!("size must be positive: '{s}'"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_bounded_one_line_errors() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("365d"), Ok(MAX_DURATION));
        for bad in [
            "99999999999999999h",
            "1e400s",
            "366d",
            "179769313486231570000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000s",
            "0",
            "-1s",
            "0.1ms",
            "nan",
            "inf",
            "",
            "soon",
            "10x",
        ] {
            let e = parse_duration(bad).expect_err(bad);
            assert!(!e.contains('\n') && e.contains(bad.trim()), "{bad}: {e}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size(" 8 KB "), Ok(8192));
        for bad in ["0", "1T", "K", "-1", "99999999999999999999G", "17179869184G"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
