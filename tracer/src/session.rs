//! A tracing session: the loaded object, the planner's attachments, the
//! target set, and the read-out of in-kernel counters and histograms.
use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use aya::{
    Ebpf,
    maps::{Array, HashMap, MapData, PerCpuArray, PerCpuHashMap, RingBuf},
};
use tracer_common::{AggKey, AggValue, MAX_OPS, MAX_SLOTS, control, counter};

mod closer;
mod copy_rows;
mod cpu;
mod exact;

use self::{
    closer::{Closer, close_in_parallel},
    copy_rows::{COPY_FINAL_AFTER, COPY_RENEW_AFTER, CopyTags, is_copy_row},
    cpu::CpuMarks,
    exact::{Sampled, sampled},
};
use crate::{
    error::{Error, Result},
    events::EventStream,
    loader::{self, LoadOptions},
    probes::{Family, Planner, Status, libs, uprobes::Closed},
    report::Loss,
    sampling::{self, DutyCycle, Switch},
    stats::Aggregator,
};

#[derive(Clone, Debug, Default)]
pub struct SessionOptions {
    pub load: LoadOptions,
    /// Families to enable; `None` enables all.
    pub families: Option<Vec<Family>>,
    /// Attach the library table to the host's installed libraries up front.
    pub installed_libraries: bool,
    /// How the sampled rows (collectives, group and UCX data calls) are
    /// traced (`--collectives`).
    pub collectives: sampling::Mode,
}

pub struct Session {
    pub ebpf: Ebpf,
    pub planner: Planner,
    /// The sampled rows' duty cycle.
    pub duty: DutyCycle,
    /// When the session opened (the duty cycle's clock), when the
    /// aggregates were last read, and when the sampled rows last began
    /// counting (their links attached, `SAMPLE_OFF` cleared).
    opened: Instant,
    last_tick: Instant,
    counting_since: Instant,
    /// When the last short on phase stopped counting (between two beats:
    /// the interval the next beat ends is split there).
    counting_until: Option<Instant>,
    /// The tracing window is closed: the cycle switches no more.
    stopped: bool,
    /// Closes the links of ended on phases off the tracing loop.
    closer: Closer,
    /// Of `off_phase_traps`, those that fell while the sampled links were
    /// being attached (the rest fell while they closed).
    attach_traps: u64,
    /// Calls per op of the sampled rows as last read (which links to
    /// attach last).
    heat: BTreeMap<u32, u64>,
    /// The CPU time each process of sampled rows had run (ns) where the
    /// interval in progress began counting, and where the last short on
    /// phase stopped counting: the duty cycle's `Input::Duty` says how
    /// much of each on part a process ran ([`CpuMarks::between`]).
    cpu: CpuMarks,
    /// The copy rows' tags, for their reclaim.
    copy_tags: CopyTags,
    /// The exact rows' rates, and the ops that joined the sampled rows.
    exact: exact::Exact,
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
        let now = Instant::now();
        let mut duty = DutyCycle::new(opts.collectives);
        // Any seed will do, as long as two sessions differ.
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        duty.seed(clock ^ (u64::from(std::process::id()) << 32));
        let mut s = Session {
            ebpf,
            planner,
            duty,
            opened: now,
            last_tick: now,
            counting_since: now,
            counting_until: None,
            stopped: false,
            closer: Closer::default(),
            attach_traps: 0,
            heat: BTreeMap::new(),
            cpu: CpuMarks::default(),
            copy_tags: CopyTags::new(now),
            exact: exact::Exact::default(),
        };
        // Looked for either way: a library row no traced process maps says
        // whether it is installed, as `doctor` does.
        let installed = libs::installed();
        s.planner.installed = Some(installed.iter().map(|f| (f.lib, f.path.clone())).collect());
        if opts.installed_libraries {
            for file in installed {
                if enabled(file.lib.family()) {
                    s.planner.attach_library(&mut s.ebpf, &file);
                }
            }
        }
        Ok(s)
    }

    fn targets(&mut self) -> Result<HashMap<&mut MapData, u32, u32>> {
        self.map_mut("TARGETS")
    }

    /// Whether the trap cost may be needed (`calibrate.rs`): the duty cycle
    /// sampled, or may, with sampled points attached. Measured from the
    /// first attach, not the first off phase: a copy loop that goes over
    /// budget at once and exits within the second had its gaps estimated
    /// before a measurement begun at its first off phase was in (the
    /// stand-in copy loop on the development host, 2026-12-04).
    pub fn needs_trap_cost(&self) -> bool {
        self.duty.off_phases > 0 || (self.duty.cycles() && self.planner.uprobes.has_sampled())
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
        let ids = self.planner.proc_libs.entry(pid).or_default();
        let before = ids.len();
        ids.extend(mapped.libs.iter().map(|f| f.id));
        if ids.len() != before {
            self.planner.stepped_dirty.insert(pid);
        }
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
        let array: PerCpuArray<&MapData, u64> = self.map(name)?;
        (0..len)
            .map(|i| {
                array.get(&i, 0).map(|v| v.iter().sum()).map_err(|source| Error::Map {
                    name: name.into(),
                    source,
                })
            })
            .collect()
    }

    /// Traps of the sampled rows in off phases, summed over CPUs: their links
    /// were still being attached or closed (every process that calls them).
    pub fn off_phase_traps(&self) -> u64 {
        self.per_cpu_sums("COUNTERS", counter::COUNT)
            .map_or(0, |c| c[counter::SAMPLE_OFF_TRAPS as usize])
    }

    /// One of the kernel's `COUNTERS`, summed over CPUs.
    pub fn counter(&self, index: u32) -> Result<u64> {
        Ok(self.per_cpu_sums("COUNTERS", counter::COUNT)?[index as usize])
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
            damaged_lines: 0,
            complete: false,
        };
        l.settle();
        Ok(l)
    }

    /// The kernel's aggregated rows: the per-(process, op, communicator)
    /// totals of aggregate-only calls, summed over CPUs, then the copy rows.
    pub fn aggregates(&self) -> Result<Vec<(AggKey, AggValue)>> {
        let table: PerCpuHashMap<&MapData, AggKey, AggValue> = self.map("AGGREGATE")?;
        let mut rows: Vec<(AggKey, AggValue)> = table
            .iter()
            .filter_map(|r| r.ok())
            .map(|(k, per_cpu)| {
                let v = per_cpu.iter().fold(AggValue::default(), |a, v| AggValue {
                    calls: a.calls + v.calls,
                    bytes: a.bytes + v.bytes,
                });
                (k, v)
            })
            .collect();
        let copies: HashMap<&MapData, AggKey, AggValue> = self.map("COPY_ROWS")?;
        rows.extend(copies.iter().filter_map(|r| r.ok()));
        Ok(rows)
    }

    /// Deletes the copy rows no call can reach any more, whose totals in
    /// `rows` (just read and handed to the aggregator) are final
    /// ([`CopyTags::done`]); the aggregator keeps them in their class
    /// (`CopyRows::set_kernel`). Where the rows still in use fill most of
    /// the table, its generation moves on: every row starts anew, and the
    /// old ones go at a later look.
    fn reclaim_copy_rows(&mut self, rows: &[(AggKey, AggValue)]) {
        if self.copy_tags.at.elapsed() < COPY_FINAL_AFTER {
            return;
        }
        let copies: Vec<&AggKey> = rows.iter().map(|(k, _)| k).filter(|k| is_copy_row(k)).collect();
        let done = self.copy_tags.done(copies.iter().copied());
        let pids: std::collections::BTreeSet<u32> = copies.iter().map(|k| k.tgid).collect();
        let Ok(epochs) = self.map::<HashMap<&MapData, u32, u64>>("COPY_EPOCH") else {
            return;
        };
        let epochs: Vec<(u32, u64)> = pids.into_iter().map(|p| (p, epochs.get(&p, 0).unwrap_or(0))).collect();
        self.copy_tags.look(epochs, Instant::now());
        if let Ok(mut table) = self.map_mut::<HashMap<&mut MapData, AggKey, AggValue>>("COPY_ROWS") {
            for k in &done {
                let _ = table.remove(k);
            }
        }
        let capacity = match self.ebpf.map("COPY_ROWS") {
            Some(aya::maps::Map::HashMap(d)) => d.info().map_or(0, |i| i.max_entries() as usize),
            _ => 0,
        };
        let in_use = copies.len() - done.len();
        // The rows of the last renewal go two looks after it: not again before.
        let renewing = self.copy_tags.renewed.is_some_and(|t| t.elapsed() < COPY_RENEW_AFTER);
        if capacity > 0 && in_use * 4 > capacity * 3 && !renewing {
            self.copy_tags.renewed = Some(Instant::now());
            self.copy_tags.generation += 1;
            log::info!(
                "copy rows: {in_use} of {capacity} in use: every row starts anew (generation {})",
                self.copy_tags.generation
            );
            if let Err(e) = self.set_control(control::COPY_GEN, self.copy_tags.generation) {
                log::warn!("renewing the copy rows: {e}");
            }
        }
    }

    /// How many times the copy-row table was renewed (its rows in use
    /// filled most of it).
    pub fn copy_renewals(&self) -> u64 {
        self.copy_tags.generation
    }

    /// A map of the object, as the aya type `M`.
    fn map<'a, M: TryFrom<&'a aya::maps::Map, Error = aya::maps::MapError>>(&'a self, name: &'static str) -> Result<M> {
        let map = self.ebpf.map(name).ok_or(Error::MissingMap(name))?;
        M::try_from(map).map_err(|source| Error::Map {
            name: name.into(),
            source,
        })
    }

    /// A map of the object to write, as the aya type `M`.
    fn map_mut<'a, M: TryFrom<&'a mut aya::maps::Map, Error = aya::maps::MapError>>(
        &'a mut self,
        name: &'static str,
    ) -> Result<M> {
        let map = self.ebpf.map_mut(name).ok_or(Error::MissingMap(name))?;
        M::try_from(map).map_err(|source| Error::Map {
            name: name.into(),
            source,
        })
    }

    /// Closes the tracing window: every program returns at once from now
    /// on, so nothing that fires while links are being closed is recorded
    /// or counted as lost.
    pub fn stop(&mut self) -> Result<()> {
        self.stopped = true;
        self.set_control(control::STOPPED, 1)
    }

    /// Writes one slot of the `CONTROL` array.
    fn set_control(&mut self, index: u32, value: u64) -> Result<()> {
        let mut control: Array<&mut MapData, u64> = self.map_mut("CONTROL")?;
        control.set(index, &value, 0).map_err(|source| Error::Map {
            name: "CONTROL".into(),
            source,
        })
    }

    /// One tick of the kernel aggregation: the duty cycle's last interval
    /// goes to the aggregator (the part the sampled rows counted in and the
    /// part they did not: an on phase counts from the moment its links
    /// are attached), then the kernel's totals, then the uncounted rest of
    /// the interval after a short on phase ended in it; then the cycle
    /// switches if a phase is over (not once the window is closed).
    pub fn aggregate_tick(&mut self, agg: &mut Aggregator) {
        // Which rows of each process are single-stepped, before any rate
        // of theirs is taken.
        for pid in std::mem::take(&mut self.planner.stepped_dirty) {
            agg.stepped(pid, &self.planner.stepped_rows_of(pid));
        }
        let now = Instant::now();
        let now_ns = crate::host::monotonic_ns();
        // Read before the interval goes to the aggregator, so that the
        // processes whose rows began in it have their CPU time read.
        let rows = self.aggregates();
        // Each process's traps and each op's calls in the sampled rows: only
        // the duty cycle reads them.
        let Sampled { traps, heat, exact } = match &rows {
            Ok(rows) if self.duty.cycles() => sampled(rows),
            _ => Sampled::default(),
        };
        let mut after = 0;
        if self.duty.cycles() {
            self.exact_tell(agg);
            if rows.is_ok() {
                self.exact_read(exact, now);
            }
            self.cpu
                .watch(traps.keys().copied(), self.planner.proc_libs.keys().copied());
            let us = |a: Instant, b: Instant| b.saturating_duration_since(a).as_micros() as u64;
            let from = self.counting_since.max(self.last_tick);
            let stopped_cpu = self.cpu.until.take();
            let (until, end_cpu) = match self.counting_until.take() {
                Some(t) if t > self.last_tick => (Some(t), stopped_cpu),
                _ if self.duty.is_on() => (Some(now), Some(self.cpu.now())),
                _ => (None, None),
            };
            let (on, off) = match until {
                Some(t) => {
                    after = us(t, now);
                    (us(from, t), us(self.last_tick, from.min(t)))
                }
                None => (0, us(self.last_tick, now)),
            };
            let from_ns = now_ns.saturating_sub(now.saturating_duration_since(from).as_nanos() as u64);
            let cpu = end_cpu.as_ref().map_or_else(Vec::new, |e| self.cpu.between(from_ns, e));
            agg.duty(on, off, &cpu);
            // Counting goes on: the next interval counts from here.
            if until == Some(now) {
                self.cpu.from = end_cpu.unwrap_or_default();
            }
        }
        self.last_tick = now;
        let Ok(rows) = rows else { return };
        agg.set_aggregates(crate::host::monotonic_ns(), &rows);
        self.reclaim_copy_rows(&rows);
        if after > 0 {
            agg.duty_rest(after);
        }
        if self.stopped || !self.duty.cycles() {
            return;
        }
        self.duty.quick = matches!(self.planner.uprobes.mode(), Some(crate::probes::uprobes::Mode::Multi));
        self.heat = heat;
        self.duty.uncounted(self.off_phase_traps());
        if let Some(switch) = self.duty.tick(now.duration_since(self.opened), &traps) {
            self.switch(switch);
        }
    }

    /// When the current short on phase of the duty cycle must end (between
    /// two beats of the loop), if one is running.
    pub fn duty_deadline(&self) -> Option<Instant> {
        (!self.stopped)
            .then(|| self.duty.deadline())
            .flatten()
            .map(|d| self.opened + d)
    }

    /// Sleeps until `deadline` ([`Session::duty_deadline`]); forever
    /// without one (a branch of the tracing loop's `select!`). tokio's
    /// timer fires on whole milliseconds, up to one late: it wakes the
    /// loop a millisecond early and the rest is slept on this thread, so a
    /// short on phase of 1 ms counts for about 1 ms, not up to 2.
    pub async fn until(deadline: Option<Instant>) {
        match deadline {
            Some(d) => {
                let early = d.checked_sub(Duration::from_millis(1)).unwrap_or(d);
                tokio::time::sleep_until(early.into()).await;
                let left = d.saturating_duration_since(Instant::now());
                if !left.is_zero() {
                    std::thread::sleep(left);
                }
            }
            None => std::future::pending().await,
        }
    }

    /// The duty cycle's deadline has come ([`Session::duty_deadline`]). A
    /// short on phase ends: the kernel's switch at once, the links to the
    /// closer, then a tick reads its counts, which set the off phase after
    /// it. An off phase ends: the links again. A check while counting on:
    /// a tick.
    pub fn duty_due(&mut self, agg: &mut Aggregator) {
        if self.stopped {
            return;
        }
        let now = Instant::now();
        match self.duty.at_deadline(now.duration_since(self.opened)) {
            Some(off @ Switch::Off { .. }) => {
                self.switch(off);
                self.aggregate_tick(agg);
            }
            Some(on) => self.switch(on),
            None => self.aggregate_tick(agg),
        }
    }

    /// Carries out a switch of the duty cycle. Off: the kernel's switch
    /// first (nothing counts from now on), then the links go to the closer.
    /// On: the links first, then the switch.
    fn switch(&mut self, switch: Switch) {
        match switch {
            Switch::Off { why } => {
                if let Err(e) = self.set_control(control::SAMPLE_OFF, 1) {
                    log::warn!("starting an off phase of the sampled rows: {e}");
                }
                // Counting stopped here, not once the links are handed over.
                self.counting_until = Some(Instant::now());
                self.cpu.until = Some(self.cpu.now());
                let (mut links, closed) = self.planner.uprobes.close_sampled(&mut self.ebpf);
                links.extend(self.exact_join_hot());
                if !why.is_empty() {
                    log::info!(
                        "sampled rows off ({why}): closing {} link(s) of {} point(s)",
                        closed.links,
                        closed.points
                    );
                    self.planner.sampling_note.get_or_insert(why);
                }
                self.closer.close(links);
            }
            Switch::On => {
                // The hottest links go last: a row traps (uncounted) from
                // its link's attach until the switch below.
                let before = self.off_phase_traps();
                let hot = &self.heat;
                let heat = |op: u32| hot.get(&op).copied().unwrap_or(0);
                for e in self.planner.uprobes.open_sampled(&mut self.ebpf, heat) {
                    log::warn!("sampled rows on: {e}");
                }
                self.attach_traps += self.off_phase_traps().saturating_sub(before);
                // Only the links just attached count from here.
                let generation = self.planner.uprobes.generation();
                if let Err(e) = self.set_control(control::SAMPLE_GEN, generation.into()) {
                    log::warn!("starting an on phase of the sampled rows: {e}");
                }
                if let Err(e) = self.set_control(control::SAMPLE_OFF, 0) {
                    log::warn!("starting an on phase of the sampled rows: {e}");
                }
                self.counting_since = Instant::now();
                self.cpu.from = self.cpu.now();
                self.duty.opened(self.counting_since.duration_since(self.opened));
            }
        }
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
        // The kernel's switch first: no call is half-seen while the links close.
        if let Err(e) = self.set_control(control::SETUP_OFF, 1) {
            log::warn!("switching the set-up rows off: {e}");
        }
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
        close_in_parallel(links);
        // And the links of ended on phases, if any are still closing.
        self.closer.join();
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
/// kernel unregisters each behind a grace period. And what the duty cycle's
/// switches cost that no count shows: the traps of the sampled rows while
/// their links were being attached or closed.
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
    let off = session.off_phase_traps();
    if off > 0 {
        let attach = session.attach_traps.min(off);
        errln!(
            "gdrtrace: {off} trap(s) of the sampled rows in off phases ({attach} while their links were attached, {} while they closed): not counted, not lost",
            off - attach
        );
    }
    let mut took = session.closer.took.clone();
    if !took.is_empty() {
        took.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let stale = session
            .per_cpu_sums("COUNTERS", counter::COUNT)
            .map_or(0, |c| c[counter::SAMPLE_STALE as usize]);
        errln!(
            "gdrtrace: the sampled links of {} on phase(s) closed in {:.0} ms (median; at most {:.0} ms, {} phase(s) closing at once); {stale} run(s) on links still closing while a later on phase counted: each call counted once",
            took.len(),
            ms(took[took.len() / 2]),
            ms(took[took.len() - 1]),
            session.closer.most
        );
    }
}
