//! The CPU clocks of the processes of sampled rows at the ends of each
//! counting time, for the estimator's trap share over CPU time.
use std::collections::BTreeMap;

/// The processes of sampled rows and their CPU clocks at the ends of the
/// counting time (`host::process_cpu_ns`).
#[derive(Default)]
pub(super) struct CpuMarks {
    pub(super) pids: Vec<u32>,
    pub(super) from: BTreeMap<u32, u64>,
    pub(super) until: Option<BTreeMap<u32, u64>>,
}

/// The most processes whose CPU clocks are read at each switch of the duty
/// cycle (up to 20 a second): 0.3 us each on the development host.
pub(super) const CPU_WATCHED: usize = 64;

impl CpuMarks {
    /// The processes to read: those with sampled rows, then those that map
    /// a library file the tracer attached (a loop's rows begin with its
    /// first call, after its process started), at most [`CPU_WATCHED`].
    pub(super) fn watch(&mut self, rows: impl Iterator<Item = u32>, mapping: impl Iterator<Item = u32>) {
        let mut pids: Vec<u32> = rows.collect();
        let known: std::collections::BTreeSet<u32> = pids.iter().copied().collect();
        pids.extend(mapping.filter(|p| !known.contains(p)));
        pids.truncate(CPU_WATCHED);
        self.pids = pids;
    }

    pub(super) fn now(&self) -> BTreeMap<u32, u64> {
        self.pids
            .iter()
            .filter_map(|p| crate::host::process_cpu_ns(*p).map(|ns| (*p, ns)))
            .collect()
    }

    /// The CPU time (us) each process ran between `from` (`from_ns` on the
    /// monotonic clock) and the marks `end`: from the mark at `from`, or
    /// from nothing where the process started after it.
    pub(super) fn between(&self, from_ns: u64, end: &BTreeMap<u32, u64>) -> Vec<(u32, u64)> {
        end.iter()
            .filter_map(|(pid, e)| {
                let start = match self.from.get(pid) {
                    Some(s) => *s,
                    None if crate::host::process_start_ns(*pid).is_some_and(|t| t >= from_ns) => 0,
                    None => return None,
                };
                Some((*pid, e.saturating_sub(start) / 1000))
            })
            .collect()
    }
}
