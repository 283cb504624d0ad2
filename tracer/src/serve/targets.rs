//! The agent's targets: adopting processes the discovery probes name,
//! the ring buffer's events, the periodic rescans and liveness checks,
//! forgetting exited processes (by retention, by group, by bound), and the
//! agent's loop that drives them.
use super::*;

impl Agent {
    pub(super) fn meta(&mut self, pid: u32) -> &mut Meta {
        self.meta.entry(pid).or_default()
    }

    /// Reads a process's pod while it is there to read (a short-lived one
    /// is gone by the next scrape).
    pub(super) fn label(&mut self, pid: u32) {
        if self.meta.get(&pid).is_none_or(|m| m.pod.is_none()) {
            let pod = self.pods.of_pid(pid);
            self.meta(pid).pod = Some(pod);
        }
    }

    pub(super) fn schedule_rescans(&mut self, pid: u32) {
        let now = Instant::now();
        self.meta(pid).rescans = RESCANS.iter().map(|d| now + *d).collect();
    }

    /// A new target (the kernel added it already, or the scan found it).
    pub(super) fn adopt(&mut self, pid: u32, why: u32) {
        if self.meta.contains_key(&pid) && self.agg.procs().contains_key(&pid) {
            return;
        }
        let pod = self.pods.of_pid(pid);
        if let Some(reason) = self.ignored_by(pid, pod.as_ref()) {
            let _ = kernel::remove_target(&mut self.session.ebpf, pid);
            *self.ignored.entry(reason).or_default() += 1;
            self.refused.insert(pid);
            return;
        }
        *self.discovered.entry(why).or_default() += 1;
        self.agg.add_process(pid, None);
        self.meta(pid).reason = why;
        self.meta(pid).pod = Some(pod);
        self.session.attach_libraries_of(pid);
        self.schedule_rescans(pid);
    }

    /// Whether `--ignore-comm` or `--ignore-namespace` names a process.
    pub(super) fn ignored_by(&self, pid: u32, pod: Option<&PodLabels>) -> Option<&'static str> {
        if !self.ignore_comm.is_empty() {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if self.ignore_comm.contains(comm.trim_end()) {
                return Some("comm");
            }
        }
        pod.filter(|p| self.ignore_namespace.contains(&p.namespace))
            .map(|_| "namespace")
    }

    /// Shed a new target: out of the kernel's set, counted.
    pub(super) fn refuse(&mut self, pid: u32, why: &'static str) {
        let _ = kernel::remove_target(&mut self.session.ebpf, pid);
        *self.shed.entry(("target", why)).or_default() += 1;
        self.refused.insert(pid);
    }

    pub(super) fn handle(&mut self, batch: &mut Vec<Event>) {
        for e in batch.drain(..) {
            if self.refused.contains(&e.pid) {
                // What it did before it left the kernel's set; a library it
                // opens later puts it back there, and a child forked in the
                // meantime is in it: out again, without counting twice.
                match e.kind {
                    kind::EXIT => {
                        self.refused.remove(&e.pid);
                        let _ = kernel::drop_aggregate_rows(&mut self.session.ebpf, &BTreeSet::from([e.pid]));
                    }
                    kind::DISCOVER if e.args[2] == 0 => {
                        let _ = kernel::remove_target(&mut self.session.ebpf, e.pid);
                    }
                    kind::FORK => {
                        let child = e.args[0] as u32;
                        let _ = kernel::remove_target(&mut self.session.ebpf, child);
                        self.refused.insert(child);
                    }
                    _ => {}
                }
                continue;
            }
            match e.kind {
                kind::DISCOVER => {
                    self.discover_events += 1;
                    if e.args[2] != 0 {
                        // A target opened a library: map it once mapped.
                        self.schedule_rescans(e.pid);
                    } else if self.budget.level >= 2 {
                        self.refuse(e.pid, "cpu-budget");
                    } else {
                        self.adopt(e.pid, e.args[0] as u32);
                    }
                }
                kind::FORK => {
                    self.agg.push(&e);
                    let child = e.args[0] as u32;
                    if self.agg.procs().contains_key(&child) {
                        self.label(child);
                    }
                }
                kind::EXEC => {
                    self.agg.push(&e);
                    self.schedule_rescans(e.pid);
                }
                kind::EXIT => {
                    self.agg.push(&e);
                    self.meta(e.pid).exited_at.get_or_insert_with(Instant::now);
                }
                _ => self.agg.push(&e),
            }
        }
    }

    /// Processes running when the agent started.
    pub(super) fn scan(&mut self) -> usize {
        let found = discover::scan(self.me);
        for (pid, _) in &found {
            match self.session.add_target(*pid) {
                Ok(()) => self.adopt(*pid, reason::PROC_SCAN),
                Err(_) => *self.shed.entry(("target", "targets-full")).or_default() += 1,
            }
        }
        found.len()
    }

    pub(super) fn on_tick(&mut self) {
        let now = Instant::now();
        if let Some(level) = self.budget.update(now, metrics::AgentProcess::cpu_seconds_now()) {
            log::info!(
                "CPU budget {:.1}% of a CPU: shed level {level}",
                self.budget.limit * 100.0
            );
        }
        self.rescan_due(now);
        if self
            .session
            .budget_setup(&mut self.setup_hits, crate::trace::SETUP_BUDGET_HZ)
            .is_some()
        {
            self.agg.setup_closed();
        }
        if now.duration_since(self.last_alive) >= ALIVE_EVERY {
            self.last_alive = now;
            self.check_alive(now);
        }
        self.forget_expired(now);
        self.trim();
        if let Some(ras) = &mut self.nccl_ras {
            ras.due(|| !self.agg.unidentified().is_empty());
            if let Some(q) = ras.poll(self.agg.live_pids()) {
                self.agg.nccl_ras(q);
            }
        }
    }

    pub(super) fn rescan_due(&mut self, now: Instant) {
        let mut due = Vec::new();
        let shedding = self.budget.level >= 1;
        for (pid, m) in self.meta.iter_mut() {
            let before = m.rescans.len();
            m.rescans.retain(|t| *t > now);
            let n = before - m.rescans.len();
            if n > 0 {
                due.push(*pid);
            }
            if shedding && !m.rescans.is_empty() {
                *self.shed.entry(("library-rescan", "cpu-budget")).or_default() += m.rescans.len() as u64;
                m.rescans.clear();
            }
        }
        for pid in due {
            self.session.attach_libraries_of(pid);
        }
    }

    pub(super) fn check_alive(&mut self, now: Instant) {
        self.refused
            .retain(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
        self.agg.check_exited();
        for (pid, m) in self.meta.iter_mut().filter(|(_, m)| m.exited_at.is_none()) {
            let gone = match self.agg.procs().get(pid) {
                Some(p) => p.exited,
                // Known only from a record (a library opened): ask /proc.
                None => !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            };
            if gone {
                m.exited_at = Some(now);
            }
        }
        for (pid, p) in self.agg.procs() {
            if p.exited {
                self.meta.entry(*pid).or_default().exited_at.get_or_insert(now);
            }
        }
    }

    /// Drops the state of processes that exited more than `retention` ago,
    /// in user space and in the kernel maps.
    pub(super) fn forget_expired(&mut self, now: Instant) {
        let gone: BTreeSet<u32> = self
            .meta
            .iter()
            .filter(|(_, m)| m.exited_at.is_some_and(|t| now.duration_since(t) >= self.retention))
            .map(|(pid, _)| *pid)
            .collect();
        if gone.is_empty() {
            self.expire_groups(now);
            return;
        }
        for pid in &gone {
            if self.labels == LabelMode::Pod
                && let Some(f) = self.process(*pid, None, Vec::new(), false)
            {
                let group = Self::group_of(&f);
                let e = self.retired.entry(group).or_insert_with(|| {
                    let empty = ProcessFigures {
                        collective_sampled_ratio: 1.0,
                        ..Default::default()
                    };
                    (empty, now)
                });
                let mut f = f;
                // What it counted stays; what it was (a process) does not.
                f.processes = 0;
                f.pinned_bytes = None;
                f.verdict = None;
                f.comm_verdicts.clear();
                f.rdma_devices.clear();
                e.0.absorb(&f);
                e.1 = now;
            }
            self.agg.forget(*pid);
            if let Some(h) = &mut self.rdma {
                h.forget(*pid);
            }
            self.meta.remove(pid);
            self.session.planner.proc_libs.remove(pid);
            let _ = kernel::remove_target(&mut self.session.ebpf, *pid);
        }
        self.forgotten += gone.len() as u64;
        self.expire_groups(now);
        let _ = kernel::drop_aggregate_rows(&mut self.session.ebpf, &gone);
        let meta = &self.meta;
        let _ = kernel::sweep_inflight(&mut self.session.ebpf, &|tgid| {
            meta.get(&tgid).is_some_and(|m| m.exited_at.is_none())
                || std::path::Path::new(&format!("/proc/{tgid}")).exists()
        });
    }

    /// The group a process's figures are summed into (`--labels pod`).
    pub(super) fn group_of(f: &ProcessFigures) -> Group {
        match &f.pod {
            Some(p) => (Some(p.clone()), String::new()),
            None => (None, f.comm.clone()),
        }
    }

    /// Drops the retired counters of groups with no tracked process left
    /// for `retention` (as a process's series go after it).
    pub(super) fn expire_groups(&mut self, now: Instant) {
        if self.retired.is_empty() {
            return;
        }
        let live: BTreeSet<Group> = self
            .agg
            .procs()
            .keys()
            .filter_map(|pid| {
                let m = self.meta.get(pid)?;
                let comm = self.agg.procs().get(pid).map(|p| p.comm.clone()).unwrap_or_default();
                Some(match m.pod.clone().flatten() {
                    Some(p) => (Some(p), String::new()),
                    None => (None, comm),
                })
            })
            .collect();
        let retention = self.retention;
        self.retired
            .retain(|g, (_, at)| live.contains(g) || now.duration_since(*at) < retention);
    }

    /// Per-process logs the agent exports nothing of, kept bounded.
    pub(super) fn trim(&mut self) {
        for p in self.agg.registry_mut().procs.values_mut() {
            p.churn.lifetimes_ns.clear();
            if p.seen_ranges.len() > SEEN_RANGES {
                p.seen_ranges.clear();
            }
        }
    }

    pub(super) async fn run(
        &mut self,
        mut scrapes: mpsc::Receiver<Scrape>,
        stop: impl Future<Output = ()>,
    ) -> Result<()> {
        let mut stream = self.session.events()?;
        let mut batch = Vec::new();
        let mut tick = tokio::time::interval(TICK);
        let mut drain = tokio::time::interval(crate::trace::DRAIN);
        // The duty cycle's own beat, as `run` and `attach` tick: a process
        // over budget has its sampled links closed within 250 ms, and short
        // on phases begin on it.
        let mut beat = tokio::time::interval(crate::sampling::BEAT);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        drain.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(stop);
        loop {
            self.health.beat_loop();
            tokio::select! {
                r = stream.next_or_beat(&mut batch, &mut drain) => {
                    r.map_err(|e| Error::io("reading the ring buffer", e))?;
                    self.health.beat_reader();
                    self.handle(&mut batch);
                    batch.shrink_to(BATCH_KEEP);
                }
                _ = tick.tick() => self.on_tick(),
                _ = beat.tick() => {
                    // The kernel's counts are read next: the records before
                    // them go first (an exit before an on phase is known
                    // when its counts are: `Estimator::gone`).
                    stream.drain_now(&mut batch);
                    self.handle(&mut batch);
                    self.session.aggregate_tick(&mut self.agg);
                    if self.session.needs_trap_cost() {
                        self.calibration.start();
                    }
                    if let Some(c) = self.calibration.poll() {
                        self.agg.trap_cost(c);
                    }
                    // Collective bytes to the counters by the verdicts of now (Flow).
                    self.account(None);
                }
                () = Session::until(self.session.duty_deadline()) => {
                    stream.drain_now(&mut batch);
                    self.handle(&mut batch);
                    self.session.duty_due(&mut self.agg);
                }
                Some(s) = scrapes.recv() => {
                    // A scrape sees everything up to now.
                    stream.drain_now(&mut batch);
                    self.handle(&mut batch);
                    if let Ok(rows) = self.session.aggregates() {
                        self.agg.set_aggregates(crate::host::monotonic_ns(), &rows);
                    }
                    self.malformed = stream.malformed;
                    let body = metrics::render(&self.snapshot(), s.format);
                    let _ = s.reply.send(body);
                }
                () = &mut stop => break,
            }
        }
        self.session.stop()
    }
}
