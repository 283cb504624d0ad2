//! What a scrape sees: the agent's figures per process (verdict, calls,
//! latency, pins, communicators) and per node, gathered into a
//! [`Snapshot`] for `metrics`.
use super::{metrics::CommVerdict, *};

impl Agent {
    /// GPU link traffic since the agent started. Who else had the GPUs
    /// open is not read (`gpu_processes`): every process that opens them is
    /// a target here, so the judging function sees the others among the
    /// traced processes.
    fn links_since(&self) -> Option<GpuLinks> {
        self.links.and_then(|b| b.since())
    }

    /// Every tracked process's verdict, by the report's judging function:
    /// its set-up calls, or, when those were not seen (it ran before the
    /// agent), its steady state against the other tracked processes.
    fn verdicts(&self) -> BTreeMap<u32, VerdictFigures> {
        self.judged().0
    }

    /// Every tracked process's verdict and paths (the busiest
    /// [`metrics::MAX_PATHS`] by bytes, the rest summed as `other`).
    fn judged(&self) -> (BTreeMap<u32, VerdictFigures>, BTreeMap<u32, Vec<metrics::PathFigures>>) {
        let inputs = judge::Inputs::of_aggregator(&self.agg, self.links_since(), Some(self.facts.clone()));
        let (verdicts, paths) = judge::judge(&inputs);
        let mut by_pid: BTreeMap<u32, Vec<metrics::PathFigures>> = BTreeMap::new();
        for p in paths {
            let peer = match p.peer_kind {
                crate::classify::path::PeerKind::NcclCommunicator => {
                    let handle = u64::from_str_radix(p.peer.trim_start_matches("0x"), 16).unwrap_or(0);
                    self.agg
                        .communicator(p.pid, handle)
                        .and_then(|c| c.comm_id.clone())
                        .unwrap_or(p.peer.clone())
                }
                _ => p.peer.clone(),
            };
            by_pid.entry(p.pid).or_default().push(metrics::PathFigures {
                peer_kind: p.peer_kind.name(),
                peer,
                op: p.op.name(),
                memory: p.memory.clone(),
                transport: p.transport.name(),
                host_staged: p.host_staged,
                bytes: p.bytes,
                host_bytes: p.host_bytes,
            });
        }
        for v in by_pid.values_mut() {
            v.sort_by_key(|a| std::cmp::Reverse(a.bytes));
            if v.len() > metrics::MAX_PATHS {
                let rest = v.split_off(metrics::MAX_PATHS);
                v.push(metrics::PathFigures {
                    peer_kind: "other",
                    peer: "other".into(),
                    op: "other",
                    memory: "other".into(),
                    transport: "other",
                    host_staged: rest.iter().any(|p| p.host_staged),
                    bytes: rest.iter().map(|p| p.bytes).sum(),
                    host_bytes: rest.iter().map(|p| p.host_bytes).sum(),
                });
            }
        }
        let verdicts = verdicts
            .into_iter()
            .map(|v| {
                let evidence_kind = match (v.transport, v.basis) {
                    _ if crate::classify::comm::is_one_rank(&v) => "one-rank",
                    (Transport::Unknown, _) => "none",
                    (_, Basis::SetUp) => "setup-calls",
                    (_, Basis::SteadyState) => "steady-state",
                };
                let f = VerdictFigures {
                    transport: v.transport.name(),
                    host_staged: v.host_staged,
                    evidence_kind,
                    net: v.net.map(|n| n.name()).unwrap_or(""),
                    cause: v.cause_kind.map(|k| k.id()).unwrap_or(""),
                };
                (v.pid, f)
            })
            .collect();
        (verdicts, by_pid)
    }

    /// Each process's collective bytes that crossed between devices now:
    /// (counted in the kernel, estimated: counted plus the closed off phases
    /// of the duty cycle); a one-rank communicator's move nothing
    /// ([`crate::stats::crosses_devices`]), as in the report.
    fn collective_bytes(&self) -> BTreeMap<u32, (u64, u64)> {
        let moves = |pid: u32, handle: u64| {
            crate::stats::crosses_devices(self.agg.communicator(pid, handle).and_then(|c| c.nranks))
        };
        let mut out: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for ((pid, _, handle), (_, bytes)) in self.agg.collectives_counted() {
            out.entry(*pid).or_default().0 += if moves(*pid, *handle) { *bytes } else { 0 };
        }
        for ((pid, _, handle), (_, bytes)) in self.agg.collectives_estimated() {
            out.entry(pid).or_default().1 += if moves(pid, handle) { bytes } else { 0 };
        }
        out
    }

    /// Adds what each process's collectives moved since the last call to
    /// its counters ([`Flow`]), as host-staged where its verdict of this
    /// moment is. The verdicts are judged only when something moved,
    /// unless a scrape, which judges them anyway, passes them.
    pub(super) fn account(&mut self, verdicts: Option<&BTreeMap<u32, VerdictFigures>>) {
        let now = self.collective_bytes();
        let moved = now.iter().any(|(pid, (c, e))| {
            self.meta
                .get(pid)
                .is_some_and(|m| m.flow.counted != *c || m.flow.estimated != *e)
        });
        if !moved {
            return;
        }
        let judged;
        let verdicts = match verdicts {
            Some(v) => v,
            None => {
                judged = self.verdicts();
                &judged
            }
        };
        for (pid, (counted, estimated)) in now {
            let Some(m) = self.meta.get_mut(&pid) else { continue };
            let f = &mut m.flow;
            let (dc, de) = (counted.saturating_sub(f.counted), estimated.saturating_sub(f.estimated));
            f.counted = f.counted.max(counted);
            f.estimated = f.estimated.max(estimated);
            if verdicts.get(&pid).is_some_and(|v| v.host_staged) {
                f.staged += dc;
                f.staged_estimated += de;
            }
        }
    }

    /// A process's communicators as series: the first `MAX_COMMUNICATORS`
    /// it used by name (busiest first among those that appear in the same
    /// scrape), the rest summed as `other` ([`Flow::named`]). A name is the
    /// identity every rank of the communicator shares (NCCL's `commId`,
    /// from its `ncclCommInitRank*` call), with this process's rank and the
    /// rank count; a communicator whose init was not seen (the process ran
    /// before the agent) is `local-N`, its place in the process's order.
    fn communicators(&mut self, pid: u32) -> Vec<Communicator> {
        let mut by_handle: BTreeMap<u64, BTreeMap<&str, Communicator>> = BTreeMap::new();
        let estimated = self.agg.collectives_estimated();
        for ((cp, op, handle), (calls, bytes)) in self.agg.collectives_counted() {
            if *cp != pid {
                continue;
            }
            let (calls_estimated, bytes_estimated) = estimated
                .get(&(*cp, op.clone(), *handle))
                .copied()
                .unwrap_or((*calls, *bytes));
            by_handle.entry(*handle).or_default().insert(
                op,
                Communicator {
                    op: op.clone(),
                    calls: *calls,
                    bytes: *bytes,
                    calls_estimated,
                    bytes_estimated,
                    ..Default::default()
                },
            );
        }
        let identity: BTreeMap<String, &crate::stats::Communicator> = self
            .agg
            .procs()
            .get(&pid)
            .map(|p| p.communicators.iter().map(|c| (c.communicator.clone(), c)).collect())
            .unwrap_or_default();
        let Some(m) = self.meta.get_mut(&pid) else {
            return Vec::new();
        };
        let named = &mut m.flow.named;
        let mut fresh: Vec<(u64, u64)> = by_handle
            .iter()
            .filter(|(h, _)| !named.contains(h))
            .map(|(h, ops)| (*h, ops.values().map(|c| c.bytes).sum()))
            .collect();
        fresh.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        for (h, _) in fresh {
            if named.len() < metrics::MAX_COMMUNICATORS {
                named.push(h);
            }
        }
        let mut out: BTreeMap<(String, String), Communicator> = BTreeMap::new();
        for (h, ops) in by_handle {
            let (name, rank, nranks) = match named.iter().position(|n| *n == h) {
                Some(i) => match identity.get(&format!("{h:#x}")) {
                    Some(c) => (
                        c.comm_id.clone().unwrap_or_else(|| format!("local-{}", i + 1)),
                        c.rank.map(|r| r.to_string()).unwrap_or_default(),
                        c.nranks.map(|n| n.to_string()).unwrap_or_default(),
                    ),
                    None => (format!("local-{}", i + 1), String::new(), String::new()),
                },
                None => ("other".into(), String::new(), String::new()),
            };
            for (op, c) in ops {
                let e = out
                    .entry((name.clone(), op.to_string()))
                    .or_insert_with(|| Communicator {
                        handle: name.clone(),
                        rank: rank.clone(),
                        nranks: nranks.clone(),
                        op: op.to_string(),
                        ..Default::default()
                    });
                e.calls += c.calls;
                e.bytes += c.bytes;
                e.calls_estimated += c.calls_estimated;
                e.bytes_estimated += c.bytes_estimated;
            }
        }
        out.into_values().collect()
    }

    pub(super) fn process(
        &mut self,
        pid: u32,
        verdict: Option<VerdictFigures>,
        paths: Vec<metrics::PathFigures>,
        sample: bool,
    ) -> Option<ProcessFigures> {
        self.label(pid);
        let communicators = self.communicators(pid);
        let pod = self.meta.get(&pid).and_then(|m| m.pod.clone()).flatten();
        let p = self.agg.procs().get(&pid)?;
        let live = !p.exited && sample;
        let cpu = if live {
            crate::counters::cpu_seconds(pid).or(p.cpu_seconds)
        } else {
            p.cpu_seconds
        };
        let meta = self.meta.get_mut(&pid)?;
        // The sample taken at the exit can be older than the last scrape's.
        let cpu_seconds = match (cpu, meta.flow.cpu_seconds) {
            (Some(c), Some(before)) => Some(c.max(before)),
            (c, before) => c.or(before),
        };
        meta.flow.cpu_seconds = cpu_seconds;
        let meta = &self.meta[&pid];
        let flow = &meta.flow;
        let registrations = self
            .agg
            .registry()
            .procs
            .get(&pid)
            .map(|r| {
                r.churn
                    .by_backing
                    .iter()
                    .map(|(b, c)| (*b, c.registrations, c.deregistrations))
                    .collect()
            })
            .unwrap_or_default();
        // The process's verdict on each communicator, but a communicator of
        // one rank moves nothing whatever the process's evidence says.
        let mut comm_verdicts: Vec<CommVerdict> = Vec::new();
        if let Some(v) = &verdict {
            for c in &communicators {
                let verdict = if c.nranks == "1" {
                    VerdictFigures {
                        transport: Transport::Unknown.name(),
                        host_staged: false,
                        evidence_kind: "one-rank",
                        net: "",
                        cause: "",
                    }
                } else {
                    v.clone()
                };
                let row = CommVerdict {
                    communicator: c.handle.clone(),
                    rank: c.rank.clone(),
                    nranks: c.nranks.clone(),
                    verdict,
                };
                if !comm_verdicts.contains(&row) {
                    comm_verdicts.push(row);
                }
            }
        }
        Some(ProcessFigures {
            pid,
            comm: if p.comm.is_empty() { "?".into() } else { p.comm.clone() },
            pod,
            discovered_by: discover::reason_name(meta.reason),
            exited: p.exited,
            nccl_hostid: crate::classify::comm::host_id(&p.env).unwrap_or_default().to_string(),
            processes: 1,
            verdict,
            comm_verdicts,
            paths,
            communicators,
            moved_bytes: p.moved_bytes + flow.counted,
            staged_bytes: p.staged_bytes + flow.staged,
            moved_bytes_estimated: p.moved_bytes + flow.estimated,
            staged_bytes_estimated: p.staged_bytes + flow.staged_estimated,
            registrations,
            pages_pinned: p.pages_pinned,
            pages_unpinned: p.pages_unpinned,
            pinned_bytes: live
                .then(|| crate::counters::vm_pin_kib(pid))
                .flatten()
                .map(|k| k * 1024),
            cpu_seconds,
            calls_by_transport: p.transports.iter().map(|(t, n)| (*t, *n)).collect(),
            socket_sent_bytes: p.socket.bytes_sent,
            socket_received_bytes: p.socket.bytes_received,
            collective_sampled_ratio: p.collectives_sampled.share(),
            estimates_lower_bound: self.agg.estimates_lower_bound(pid),
        })
    }

    pub(super) fn snapshot(&mut self) -> Snapshot {
        let (mut verdicts, mut paths) = self.judged();
        self.account(Some(&verdicts));
        let sample = self.budget.level == 0;
        let pids: Vec<u32> = self.agg.procs().keys().copied().collect();
        if !sample {
            let live = pids.iter().filter(|p| !self.agg.procs()[*p].exited).count() as u64;
            *self.shed.entry(("process-sample", "cpu-budget")).or_default() += live;
        }
        let all: Vec<ProcessFigures> = pids
            .into_iter()
            .filter_map(|pid| {
                self.process(
                    pid,
                    verdicts.remove(&pid),
                    paths.remove(&pid).unwrap_or_default(),
                    sample,
                )
            })
            .collect();
        let (active, idle): (Vec<ProcessFigures>, Vec<ProcessFigures>) = all.into_iter().partition(|p| p.active());
        let processes = match self.labels {
            LabelMode::Process => active,
            LabelMode::Pod => self.grouped(active),
        };
        let ebpf = &self.session.ebpf;
        let c = kernel::counters(ebpf).unwrap_or_else(|_| vec![0; counter::COUNT as usize]);
        let mut shed: Vec<(&'static str, &'static str, u64)> = vec![
            ("target", "targets-full", c[counter::TARGETS_FULL as usize]),
            ("target", "cpu-budget", 0),
        ];
        for ((what, why), n) in &self.shed {
            match shed.iter_mut().find(|s| s.0 == *what && s.1 == *why) {
                Some(s) => s.2 += n,
                None => shed.push((what, why, *n)),
            }
        }
        let planner = &self.session.planner;
        Snapshot {
            node: self.node.clone(),
            processes,
            op_latency: self
                .session
                .kernel_slots()
                .unwrap_or_default()
                .into_iter()
                .map(|(op, s)| (crate::probes::ops::op_name(op), s))
                .collect(),
            registration_latency: self
                .agg
                .reg_latency()
                .iter()
                .map(|(b, h)| (*b, metrics::Hist::from_hdr(h)))
                .collect(),
            probes: planner
                .table()
                .iter()
                .map(|r| metrics::Probe {
                    point: r.point.clone(),
                    family: r.family.name(),
                    status: match r.status {
                        Status::Attached => "attached",
                        Status::Unavailable => "unavailable",
                    },
                    via: r.via.unwrap_or(""),
                })
                .collect(),
            probe_hits: self
                .session
                .hits()
                .unwrap_or_default()
                .into_iter()
                .map(|(op, n)| (crate::probes::ops::op_name(op), n))
                .collect(),
            library_files: planner.libs.len() as u64,
            setup_probes_closed: planner.setup_dropped.is_some(),
            lost: vec![
                ("ringbuf_full", c[counter::RINGBUF_DROPS as usize]),
                ("inflight_full", c[counter::INFLIGHT_FULL as usize]),
                ("read_error", c[counter::READ_ERRORS as usize]),
                ("aggregate_full", c[counter::AGGREGATE_FULL as usize]),
                ("malformed", self.malformed),
                ("undecoded", self.agg.undecoded()),
            ],
            returns_without_entry: c[counter::RETURN_WITHOUT_ENTRY as usize],
            discovery_read_errors: c[counter::DISCOVER_READ_ERRORS as usize],
            shed,
            discovered: discover::REASONS
                .iter()
                .map(|r| (discover::reason_name(*r), self.discovered.get(r).copied().unwrap_or(0)))
                .collect(),
            forgotten: self.forgotten,
            events: self.agg.events() + self.discover_events,
            maps: ["TARGETS", "AGGREGATE", "COPY_ROWS", "INFLIGHT"]
                .into_iter()
                .filter_map(|m| kernel::fill(ebpf, m).map(|(n, max)| (m, n, max)))
                .collect(),
            node_pins: crate::counters::FollPin::read(),
            agent: metrics::AgentProcess::read(),
            cpu_budget: self.budget.limit,
            shed_level: self.budget.level,
            tracked: self.agg.procs().len() as u64,
            idle: idle.len() as u64,
            ignored: ["comm", "namespace"]
                .into_iter()
                .map(|r| (r, self.ignored.get(r).copied().unwrap_or(0)))
                .collect(),
            nvml_available: self.nvml_available,
        }
    }

    /// `--labels pod`: the active processes summed per pod (or per command
    /// outside pods), onto what the group's forgotten processes counted.
    fn grouped(&self, active: Vec<ProcessFigures>) -> Vec<ProcessFigures> {
        let mut groups: BTreeMap<Group, ProcessFigures> =
            self.retired.iter().map(|(g, (f, _))| (g.clone(), f.clone())).collect();
        for p in active {
            let g = Self::group_of(&p);
            let e = groups.entry(g.clone()).or_insert_with(|| ProcessFigures {
                collective_sampled_ratio: 1.0,
                ..Default::default()
            });
            e.absorb(&p);
        }
        groups
            .into_iter()
            .map(|((pod, comm), mut f)| {
                f.pid = 0;
                f.comm = if pod.is_some() { String::new() } else { comm };
                f.pod = pod;
                f
            })
            .collect()
    }
}
