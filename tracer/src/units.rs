//! Units: parsing of the durations and sizes given on the command line,
//! and every byte, size and nanosecond formatter of the tracer's output
//! (like libbpf-tools' `trace_helpers`).
//!
//! Parsing is bounded: a value out of range is a one-line error, never a
//! panic (a float too large for `Duration` used to be one). The formatters
//! differ on purpose, one per kind of output; each says where it is used.
use std::time::Duration;

use serde::Serialize;

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

/// A comma-separated list of byte sizes (`4K,64K,1M`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SizeList(pub Vec<u64>);

impl std::fmt::Display for SizeList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.0.iter().map(u64::to_string).collect();
        f.write_str(&parts.join(","))
    }
}

/// Parses a comma-separated list of sizes (see [`parse_size`]).
pub fn parse_sizes(s: &str) -> Result<SizeList, String> {
    let v = s
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(parse_size)
        .collect::<Result<Vec<_>, _>>()?;
    if v.is_empty() {
        return Err(format!("no sizes in '{s}'"));
    }
    Ok(SizeList(v))
}

/// bpftrace's power-of-two labels: 512, 1K, 2M, 4G, 1T (histogram buckets,
/// transfer sizes in compare rows); a value that is no exact multiple is
/// printed in full.
pub fn size_label(v: u64) -> String {
    const UNITS: [(u64, &str); 4] = [(1 << 40, "T"), (1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")];
    for (size, unit) in UNITS {
        if v >= size && v.is_multiple_of(size) {
            return format!("{}{unit}", v / size);
        }
    }
    v.to_string()
}

/// A duration as `parse_duration` reads it back: `250ms`, `1s`, `1.5s`,
/// `40s`, `1m` (duty-cycle phases in coverage details and reasons).
pub fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// Nanoseconds with one decimal (two for seconds): `850ns`, `8.3us`,
/// `1.2ms`, `2.50s` (report tables, compare rows and plots).
pub fn ns(v: u64) -> String {
    match v {
        0..1_000 => format!("{v}ns"),
        1_000..1_000_000 => format!("{:.1}us", v as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1}ms", v as f64 / 1e6),
        _ => format!("{:.2}s", v as f64 / 1e9),
    }
}

/// Nanoseconds, short: whole microseconds, one decimal above (`8us`,
/// `1.0ms`, `2.5s`; `attach --interval` lines).
pub fn ns_short(v: u64) -> String {
    match v {
        0..1_000 => format!("{v}ns"),
        1_000..1_000_000 => format!("{}us", v / 1_000),
        1_000_000..1_000_000_000 => format!("{:.1}ms", v as f64 / 1e6),
        _ => format!("{:.1}s", v as f64 / 1e9),
    }
}

/// Byte counts in report tables: `-` for none, `300B`, `1.5KiB`, `2.0MiB`,
/// `1.25GiB`.
pub fn bytes(v: u64) -> String {
    match v {
        0 => "-".into(),
        1..1024 => format!("{v}B"),
        1024..1_048_576 => format!("{:.1}KiB", v as f64 / 1024.0),
        1_048_576..1_073_741_824 => format!("{:.1}MiB", v as f64 / 1_048_576.0),
        _ => format!("{:.2}GiB", v as f64 / 1_073_741_824.0),
    }
}

/// Byte amounts in `topo`: `300 B`, `1.0 KiB` ... `2.0 TiB`.
pub fn bytes_spaced(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Limits in messages: `1 GiB`, `1.5 GiB`, `512 MiB`, `300 B`.
pub fn bytes_limit(n: u64) -> String {
    for (unit, name) in [(1u64 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")] {
        if n >= unit {
            return if n.is_multiple_of(unit) {
                format!("{} {name}", n / unit)
            } else {
                format!("{:.1} {name}", n as f64 / unit as f64)
            };
        }
    }
    format!("{n} B")
}

/// Axis labels for byte sizes on plots: `64M`, `9.8K`.
pub fn axis_bytes(x: f64) -> String {
    for (unit, s) in [(1u64 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")] {
        let v = x / unit as f64;
        if v >= 1.0 {
            return if (v - v.round()).abs() < 0.05 {
                format!("{}{s}", v.round())
            } else {
                format!("{v:.1}{s}")
            };
        }
    }
    format!("{}", x.round())
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
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("64k"), Ok(65536));
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size(" 8 KB "), Ok(8192));
        for bad in ["0", "1T", "K", "-1", "99999999999999999999G", "17179869184G"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn size_lists() {
        assert_eq!(parse_sizes("1K,,2K"), Ok(SizeList(vec![1024, 2048])));
        assert!(parse_sizes(",").is_err());
        assert!(parse_sizes("1K,x").is_err());
        assert_eq!(SizeList(vec![1, 2]).to_string(), "1,2");
    }

    #[test]
    fn formatters() {
        assert_eq!(size_label(512), "512");
        assert_eq!(size_label(1024), "1K");
        assert_eq!(size_label(2 << 20), "2M");
        assert_eq!(size_label(3 << 30), "3G");
        assert_eq!(size_label(1 << 40), "1T");
        assert_eq!(size_label(1536), "1536");
        assert_eq!(ns(999), "999ns");
        assert_eq!(ns(8_300), "8.3us");
        assert_eq!(ns(1_200_000), "1.2ms");
        assert_eq!(ns(2_500_000_000), "2.50s");
        assert_eq!(ns_short(8_300), "8us");
        assert_eq!(ns_short(2_500_000_000), "2.5s");
        assert_eq!(bytes(0), "-");
        assert_eq!(bytes(300), "300B");
        assert_eq!(bytes(1536), "1.5KiB");
        assert_eq!(bytes(5 << 30), "5.00GiB");
        assert_eq!(bytes_spaced(300), "300 B");
        assert_eq!(bytes_spaced(1024), "1.0 KiB");
        assert_eq!(bytes_spaced(2 << 40), "2.0 TiB");
        assert_eq!(bytes_limit(1 << 30), "1 GiB");
        assert_eq!(bytes_limit(3 << 29), "1.5 GiB");
        assert_eq!(bytes_limit(300), "300 B");
        assert_eq!(axis_bytes(64.0 * 1048576.0), "64M");
        assert_eq!(axis_bytes(10000.0), "9.8K");
        assert_eq!(axis_bytes(100.0), "100");
    }
}
