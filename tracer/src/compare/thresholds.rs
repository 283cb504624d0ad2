//! Regression thresholds: documented defaults (docs/compare.md), overridable
//! for all workloads (`[defaults]`) or one (`[workloads.NAME]`) in a TOML file.
use std::collections::BTreeMap;

use serde::Deserialize;

/// The limits applied to one workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// A latency percentile is compared only with this many samples on both sides.
    pub latency_min_samples: u64,
    /// p99 is judged only with this many samples on both sides (below, shown as info).
    pub latency_p99_min_samples: u64,
    /// p50 may grow by this many percent...
    pub latency_p50_increase_pct: f64,
    /// ...and p99 by this many...
    pub latency_p99_increase_pct: f64,
    /// ...and a change smaller than this many nanoseconds never counts.
    pub latency_min_increase_ns: u64,
    /// Bandwidth (GB/s, per case and size) may fall by this many percent.
    pub bandwidth_decrease_pct: f64,
    /// CPU seconds per GB moved may grow by this many percent.
    pub cpu_per_gb_increase_pct: f64,
    /// The host-staged share of moved bytes may grow by this many points (0-100).
    pub staged_ratio_increase_points: f64,
    /// Registrations per run may grow by this many percent.
    pub registrations_increase_pct: f64,
    /// A probe point that was attached and is now unavailable fails the comparison.
    pub probe_lost_fails: bool,
    /// A measured number's margin is at least this many times the spread
    /// (highest minus lowest) of the baseline's runs (docs/compare.md).
    pub spread_factor: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            latency_min_samples: 20,
            latency_p99_min_samples: 100,
            latency_p50_increase_pct: 25.0,
            latency_p99_increase_pct: 50.0,
            latency_min_increase_ns: 1000,
            bandwidth_decrease_pct: 10.0,
            cpu_per_gb_increase_pct: 25.0,
            staged_ratio_increase_points: 1.0,
            registrations_increase_pct: 10.0,
            probe_lost_fails: true,
            spread_factor: 1.0,
        }
    }
}

/// A `[defaults]` or `[workloads.NAME]` table: every key optional.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Partial {
    latency_min_samples: Option<u64>,
    latency_p99_min_samples: Option<u64>,
    latency_p50_increase_pct: Option<f64>,
    latency_p99_increase_pct: Option<f64>,
    latency_min_increase_ns: Option<u64>,
    bandwidth_decrease_pct: Option<f64>,
    cpu_per_gb_increase_pct: Option<f64>,
    staged_ratio_increase_points: Option<f64>,
    registrations_increase_pct: Option<f64>,
    probe_lost_fails: Option<bool>,
    spread_factor: Option<f64>,
}

impl Partial {
    fn apply(&self, l: &mut Limits) {
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = self.$f { l.$f = v; } )* };
        }
        set!(
            latency_min_samples,
            latency_p99_min_samples,
            latency_p50_increase_pct,
            latency_p99_increase_pct,
            latency_min_increase_ns,
            bandwidth_decrease_pct,
            cpu_per_gb_increase_pct,
            staged_ratio_increase_points,
            registrations_increase_pct,
            probe_lost_fails,
            spread_factor
        );
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    defaults: Partial,
    #[serde(default)]
    workloads: BTreeMap<String, Partial>,
}

/// Workload names every baseline may hold: validate's (docs/compare.md)
/// and `attach`'s. A `[workloads.NAME]` table must name one of these or a
/// workload of the documents compared; anything else is a typo that would
/// silently leave the defaults in force.
pub const KNOWN_WORKLOADS: &[&str] = &[
    "pin-churn",
    "verbs-churn",
    "cuda-copy",
    "nccl-auto",
    "nccl-no-p2p",
    "nccl-no-p2p-no-shm",
    "attach",
];

/// Defaults plus the file's overrides.
#[derive(Clone, Debug, Default)]
pub struct Thresholds {
    file: File,
}

impl Thresholds {
    /// Parses a thresholds file; the error is one line (TOML's first line
    /// carries the position).
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: File = toml::from_str(text).map_err(|e| {
            let msg = e.to_string();
            msg.lines()
                .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('|'))
                .collect::<Vec<_>>()
                .join(": ")
        })?;
        let all = std::iter::once(&file.defaults).chain(file.workloads.values());
        for p in all {
            for v in [
                p.latency_p50_increase_pct,
                p.latency_p99_increase_pct,
                p.bandwidth_decrease_pct,
                p.cpu_per_gb_increase_pct,
                p.staged_ratio_increase_points,
                p.registrations_increase_pct,
                p.spread_factor,
            ]
            .into_iter()
            .flatten()
            {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(format!("thresholds must be non-negative numbers, got {v}"));
                }
            }
        }
        Ok(Thresholds { file })
    }

    /// Refuses `[workloads.NAME]` tables that name no known workload and
    /// none of `present` (the workloads of the documents compared).
    pub fn check_workloads(&self, present: &[&str]) -> Result<(), String> {
        let unknown: Vec<&str> = self
            .file
            .workloads
            .keys()
            .map(String::as_str)
            .filter(|w| !KNOWN_WORKLOADS.contains(w) && !present.contains(w))
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        let mut known: Vec<&str> = KNOWN_WORKLOADS.iter().chain(present).copied().collect();
        known.sort_unstable();
        known.dedup();
        Err(format!(
            "[workloads.{}] names no workload (known: {})",
            unknown.join("], [workloads."),
            known.join(", ")
        ))
    }

    /// The limits for one workload.
    pub fn for_workload(&self, name: &str) -> Limits {
        let mut l = Limits::default();
        self.file.defaults.apply(&mut l);
        if let Some(p) = self.file.workloads.get(name) {
            p.apply(&mut l);
        }
        l
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_then_workload_overrides() {
        let t = Thresholds::parse(
            "[defaults]\nbandwidth_decrease_pct = 5\n[workloads.nccl-auto]\nlatency_p99_increase_pct = 200\nprobe_lost_fails = false\n",
        )
        .expect("valid thresholds");
        let d = t.for_workload("pin-churn");
        assert_eq!(d.bandwidth_decrease_pct, 5.0);
        assert_eq!(d.latency_p99_increase_pct, 50.0);
        let n = t.for_workload("nccl-auto");
        assert_eq!(n.bandwidth_decrease_pct, 5.0);
        assert_eq!(n.latency_p99_increase_pct, 200.0);
        assert!(!n.probe_lost_fails);
    }

    /// docs/compare.md's defaults table is these defaults: every documented
    /// key, set to its documented value, changes nothing.
    #[test]
    fn documented_defaults_are_the_defaults() {
        let doc = include_str!("../../../docs/compare.md");
        let mut toml = String::from("[defaults]\n");
        let mut keys = 0;
        for line in doc.lines() {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            if let [_, key, value, ..] = cells.as_slice()
                && let Some(key) = key.strip_prefix('`').and_then(|k| k.strip_suffix('`'))
                && (key.starts_with("latency_")
                    || key.ends_with("_pct")
                    || key.ends_with("_points")
                    || key.ends_with("_fails")
                    || key.starts_with("spread_"))
            {
                let value = value.split_whitespace().next().unwrap_or("");
                toml.push_str(&format!("{key} = {value}\n"));
                keys += 1;
            }
        }
        assert_eq!(keys, 11, "documented keys:\n{toml}");
        let t = Thresholds::parse(&toml).unwrap_or_else(|e| panic!("{e}\n{toml}"));
        assert_eq!(t.for_workload("any"), Limits::default(), "{toml}");
    }

    #[test]
    fn unknown_key_and_bad_value_are_one_line_errors() {
        let e = Thresholds::parse("[defaults]\nbandwith_decrease_pct = 5\n").expect_err("typo must be refused");
        assert!(e.contains("bandwith_decrease_pct") && !e.contains('\n'), "{e}");
        let e = Thresholds::parse("[defaults]\nbandwidth_decrease_pct = -1\n").expect_err("negative refused");
        assert!(e.contains("non-negative"), "{e}");
        let e = Thresholds::parse("[defaults\n").expect_err("syntax error refused");
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn unknown_workload_tables_are_refused() {
        let t = Thresholds::parse("[workloads.nosuch]\nbandwidth_decrease_pct = 5\n[workloads.pin-churn]\n")
            .expect("valid TOML");
        let e = t.check_workloads(&["ib_write_bw"]).expect_err("nosuch is a typo");
        assert!(
            e.contains("[workloads.nosuch]") && e.contains("pin-churn") && e.contains("ib_write_bw"),
            "{e}"
        );
        let t = Thresholds::parse("[workloads.ib_write_bw]\n[workloads.nccl-auto]\n").expect("valid");
        assert!(
            t.check_workloads(&["ib_write_bw"]).is_ok(),
            "a workload of the documents is known"
        );
    }
}
