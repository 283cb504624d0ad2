//! The sampling modes (`--collectives`): exact, auto with a per-process
//! trap budget, or a fixed on/off cycle (docs/sampling.md#modes).
use std::{fmt, str::FromStr, time::Duration};

use crate::units::{fmt_duration, parse_duration};

/// Traps per second per process that `auto` counts exactly.
pub const DEFAULT_BUDGET_HZ: f64 = 1000.0;
/// The shortest on phase of a fixed cycle: the loop switches on its beats.
pub const MIN_FIXED_ON: Duration = Duration::from_millis(250);

/// How the sampled rows are traced (`--collectives`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    /// Always attached: every call counted.
    Exact,
    /// Exact while every process stays at or under `budget_hz` calls a
    /// second, duty-cycled above it.
    Auto { budget_hz: f64 },
    /// On for `on` of every `period`, whatever the rate (benchmarks).
    Fixed { on: Duration, period: Duration },
}

impl Default for Mode {
    fn default() -> Self {
        Mode::Auto {
            budget_hz: DEFAULT_BUDGET_HZ,
        }
    }
}

impl FromStr for Mode {
    type Err = String;

    /// `exact`, `auto`, `auto:HZ` or `ON/PERIOD` (e.g. `1s/10s`).
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let usage = "use exact, auto, auto:HZ (calls per second per process) or ON/PERIOD (e.g. 1s/10s)";
        match s {
            "exact" => return Ok(Mode::Exact),
            "auto" => return Ok(Mode::default()),
            _ => {}
        }
        if let Some(hz) = s.strip_prefix("auto:") {
            let budget_hz: f64 = hz
                .parse()
                .map_err(|_| format!("invalid call budget '{hz}' in '{s}': {usage}"))?;
            if !budget_hz.is_finite() || budget_hz <= 0.0 {
                return Err(format!(
                    "the call budget in '{s}' must be a positive number of calls per second"
                ));
            }
            return Ok(Mode::Auto { budget_hz });
        }
        let Some((on, period)) = s.split_once('/') else {
            return Err(format!("invalid collectives mode '{s}': {usage}"));
        };
        let on = parse_duration(on)?;
        let period = parse_duration(period)?;
        if on < MIN_FIXED_ON {
            return Err(format!(
                "the on phase in '{s}' is too short (at least {})",
                fmt_duration(MIN_FIXED_ON)
            ));
        }
        if on >= period {
            return Err(format!("the on phase in '{s}' must be shorter than the period"));
        }
        Ok(Mode::Fixed { on, period })
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mode::Exact => write!(f, "exact"),
            Mode::Auto { budget_hz } => write!(f, "auto:{budget_hz}"),
            Mode::Fixed { on, period } => write!(f, "{}/{}", fmt_duration(*on), fmt_duration(*period)),
        }
    }
}
