//! A tracing session: the loaded object, the planner's attachments, the
//! target set, and the read-out of in-kernel counters and histograms.
use std::collections::BTreeMap;

use aya::{
    Ebpf,
    maps::{Array, HashMap, MapData, PerCpuArray, PerCpuHashMap, RingBuf},
};
use tracer_common::{AggKey, AggValue, MAX_OPS, MAX_SLOTS, control, counter};

use crate::{
    error::{Error, Result},
    events::EventStream,
    loader::{self, LoadOptions},
    probes::{Family, Planner, Status, libs, uprobes::Closed},
    report::Loss,
};

#[derive(Clone, Debug, Default)]
pub struct SessionOptions {
    pub load: LoadOptions,
    /// Families to enable; `None` enables all.
    pub families: Option<Vec<Family>>,
    /// Attach the library table to the host's installed libraries up front.
    pub installed_libraries: bool,
}

pub struct Session {
    pub ebpf: Ebpf,
    pub planner: Planner,
}

impl Session {
    pub fn open(opts: &SessionOptions) -> Result<Self> {
        let mut ebpf = loader::load(&opts.load)?;
        let mut planner = Planner::new();
        let families = opts.families.clone();
        let enabled = move |f: Family| {
            families
                .as_ref()
                .is_none_or(|v| v.contains(&f) || matches!(f, Family::Sched))
        };
        planner.attach_catalog(&mut ebpf, &enabled);
        if let Some(row) = planner
            .coverage
            .iter()
            .find(|c| c.family == Family::Sched && c.status == Status::Unavailable)
        {
            return Err(Error::Usage(format!(
                "cannot follow processes: {} is {}",
                row.point,
                row.summary()
            )));
        }
        let mut s = Session { ebpf, planner };
        if opts.installed_libraries {
            for file in libs::installed() {
                if enabled(file.lib.family()) {
                    s.planner.attach_library(&mut s.ebpf, &file);
                }
            }
        }
        Ok(s)
    }

    fn targets(&mut self) -> Result<HashMap<&mut MapData, u32, u32>> {
        let map = self.ebpf.map_mut("TARGETS").ok_or(Error::MissingMap("TARGETS"))?;
        HashMap::try_from(map).map_err(|source| Error::Map {
            name: "TARGETS".into(),
            source,
        })
    }

    /// Adds a process to the target set (its children follow in the kernel).
    pub fn add_target(&mut self, pid: u32) -> Result<()> {
        self.targets()?.insert(&pid, &0, 0).map_err(|source| Error::Map {
            name: "TARGETS".into(),
            source,
        })
    }

    /// Attaches the library table to libraries `pid` maps that are not yet
    /// attached. Returns how many files were newly attached.
    pub fn attach_libraries_of(&mut self, pid: u32) -> usize {
        let Ok(mapped) = libs::mapped(pid) else { return 0 };
        self.planner
            .proc_libs
            .entry(pid)
            .or_default()
            .extend(mapped.libs.iter().map(|f| f.id));
        self.planner
            .proc_modules
            .entry(pid)
            .or_default()
            .extend(mapped.ucx_modules);
        mapped
            .libs
            .iter()
            .filter(|f| self.planner.attach_library(&mut self.ebpf, f))
            .count()
    }

    /// Takes the event ring buffer (once).
    pub fn events(&mut self) -> Result<EventStream> {
        let map = self.ebpf.take_map("EVENTS").ok_or(Error::MissingMap("EVENTS"))?;
        let ring = RingBuf::try_from(map).map_err(|source| Error::Map {
            name: "EVENTS".into(),
            source,
        })?;
        EventStream::new(ring).map_err(|e| Error::io("polling the ring buffer", e))
    }

    fn per_cpu_sums(&self, name: &'static str, len: u32) -> Result<Vec<u64>> {
        let map = self.ebpf.map(name).ok_or(Error::MissingMap(name))?;
        let array: PerCpuArray<&MapData, u64> = PerCpuArray::try_from(map).map_err(|source| Error::Map {
            name: name.into(),
            source,
        })?;
        (0..len)
            .map(|i| {
                array.get(&i, 0).map(|v| v.iter().sum()).map_err(|source| Error::Map {
                    name: name.into(),
                    source,
                })
            })
            .collect()
    }

    /// The in-kernel loss counters, summed over CPUs.
    pub fn loss(&self, malformed: u64, undecoded: u64) -> Result<Loss> {
        let c = self.per_cpu_sums("COUNTERS", counter::COUNT)?;
        let mut l = Loss {
            ringbuf_drops: c[counter::RINGBUF_DROPS as usize],
            inflight_full: c[counter::INFLIGHT_FULL as usize],
            return_without_entry: c[counter::RETURN_WITHOUT_ENTRY as usize],
            targets_full: c[counter::TARGETS_FULL as usize],
            read_errors: c[counter::READ_ERRORS as usize] + c[counter::AGGREGATE_FULL as usize],
            malformed_records: malformed,
            undecoded_events: undecoded,
            complete: false,
        };
        l.complete = l.ringbuf_drops
            + l.inflight_full
            + l.targets_full
            + l.read_errors
            + l.malformed_records
            + l.undecoded_events
            == 0;
        Ok(l)
    }

    /// The per-(process, op, communicator) totals of aggregate-only calls,
    /// summed over CPUs.
    pub fn aggregates(&self) -> Result<Vec<(AggKey, AggValue)>> {
        let map = self.ebpf.map("AGGREGATE").ok_or(Error::MissingMap("AGGREGATE"))?;
        let table: PerCpuHashMap<&MapData, AggKey, AggValue> =
            PerCpuHashMap::try_from(map).map_err(|source| Error::Map {
                name: "AGGREGATE".into(),
                source,
            })?;
        Ok(table
            .iter()
            .filter_map(|r| r.ok())
            .map(|(k, per_cpu)| {
                let v = per_cpu.iter().fold(AggValue::default(), |a, v| AggValue {
                    calls: a.calls + v.calls,
                    bytes: a.bytes + v.bytes,
                });
                (k, v)
            })
            .collect())
    }

    /// Closes the tracing window: every program returns at once from now
    /// on, so nothing that fires while links are being closed is recorded
    /// or counted as lost.
    pub fn stop(&mut self) -> Result<()> {
        let map = self.ebpf.map_mut("CONTROL").ok_or(Error::MissingMap("CONTROL"))?;
        let mut control: Array<&mut MapData, u64> = Array::try_from(map).map_err(|source| Error::Map {
            name: "CONTROL".into(),
            source,
        })?;
        control.set(control::STOPPED, &1, 0).map_err(|source| Error::Map {
            name: "CONTROL".into(),
            source,
        })
    }

    /// Entries of traced processes per op, summed over CPUs (every hit,
    /// entry-only ops included).
    pub fn hits(&self) -> Result<BTreeMap<u32, u64>> {
        Ok(self
            .per_cpu_sums("HITS", MAX_OPS)?
            .into_iter()
            .enumerate()
            .filter(|(_, n)| *n > 0)
            .map(|(op, n)| (op as u32, n))
            .collect())
    }

    /// Closes the set-up uprobe links (over budget: `why`).
    pub fn drop_setup(&mut self, why: String) {
        drop(self.planner.drop_setup(&mut self.ebpf, why));
    }

    /// Closes the set-up uprobe links once their hit rate since `last`
    /// (hits, when) is over `budget_hz`; updates `last`, and returns why
    /// when it closed them.
    pub fn budget_setup(&mut self, last: &mut (u64, std::time::Instant), budget_hz: f64) -> Option<String> {
        if !self.planner.uprobes.has_setup() {
            return None;
        }
        let hits = self.hits().ok()?;
        let setup: u64 = hits
            .iter()
            .filter(|(op, _)| {
                crate::probes::uapi::row_of(**op)
                    .is_some_and(|(_, r)| r.group() == crate::probes::uprobes::Group::Setup)
            })
            .map(|(_, n)| n)
            .sum();
        let (before, at) = *last;
        let secs = at.elapsed().as_secs_f64();
        *last = (setup, std::time::Instant::now());
        let rate = setup.saturating_sub(before) as f64 / secs.max(1e-3);
        if rate <= budget_hz {
            return None;
        }
        let why = format!("{rate:.0} hits/s > {budget_hz:.0}/s after {setup} hits");
        log::info!("closing the set-up uprobe links: {why}");
        self.drop_setup(why.clone());
        Some(why)
    }

    /// Closes every uprobe link now, timed (kernel programs go when the
    /// session drops). With `uprobe_multi` links this takes milliseconds;
    /// per-point links are unregistered one by one behind a grace period.
    pub fn close_uprobes(&mut self) -> Closed {
        let started = std::time::Instant::now();
        let (links, mut closed) = self.planner.uprobes.take(&mut self.ebpf, None);
        drop(links);
        closed.ms = started.elapsed().as_secs_f64() * 1e3;
        closed
    }

    /// In-kernel log2 latency slots per op (every completed call).
    pub fn kernel_slots(&self) -> Result<BTreeMap<u32, Vec<u64>>> {
        let all = self.per_cpu_sums("LATENCY", MAX_OPS * MAX_SLOTS)?;
        Ok(all
            .chunks(MAX_SLOTS as usize)
            .enumerate()
            .filter(|(_, s)| s.iter().any(|&c| c > 0))
            .map(|(op, s)| (op as u32, s.to_vec()))
            .collect())
    }
}

/// Closes the uprobe links after the report is out and says how long it
/// took: with `uprobe_multi` links milliseconds, with per-point links the
/// kernel unregisters each behind a grace period.
pub fn report_close(session: &mut Session) {
    let c = session.close_uprobes();
    if c.links > 0 {
        errln!(
            "gdrtrace: closed {} uprobe link(s) holding {} probe point(s) in {:.0} ms",
            c.links,
            c.points,
            c.ms
        );
    }
}
