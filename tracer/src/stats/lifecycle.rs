//! Processes coming and going: a target added, forked, exec'd, sampled,
//! found gone or forgotten; and the records that say so (`push`).
use tracer_common::{Event, kind};

use super::{
    Aggregator, comm_of,
    feed::Input,
    source::{Fact, Look},
};

impl Aggregator {
    pub(super) fn add_looked(&mut self, pid: u32, parent: Option<u32>, look: Option<Look>) {
        if !self.procs.contains_key(&pid) {
            self.first_sight(pid);
        }
        let needs = self.procs.get(&pid).is_none_or(|p| p.comm.is_empty() || !p.env_read);
        let look = match look {
            Some(l) => Some(l),
            None if needs => {
                let l = self.source.look(pid);
                self.note(Fact::Process {
                    pid,
                    parent,
                    comm: l.comm.clone(),
                    env: l.env.clone(),
                });
                Some(l)
            }
            None => None,
        };
        let p = self.procs.entry(pid).or_default();
        if let Some(l) = look {
            if p.comm.is_empty() {
                p.comm = l.comm.unwrap_or_default();
            }
            if !p.env_read {
                p.env = l.env;
                p.env_read = true;
            }
        }
        if p.parent.is_none() {
            p.parent = parent;
        }
    }

    /// A process that no target set announced, first seen by what it does
    /// (`attach --all`: its calls, collectives or copies): its row, name,
    /// environment and parent, as for a target.
    /// A look that found nothing (the process is gone, or a recording from
    /// before such looks has no answer) leaves its environment to be read
    /// at its first call, as then.
    pub(super) fn discovered(&mut self, pid: u32) {
        let l = self.source.look(pid);
        self.note(Fact::Process {
            pid,
            parent: l.parent,
            comm: l.comm.clone(),
            env: l.env.clone(),
        });
        let found = l.comm.is_some();
        self.add_looked(pid, l.parent, Some(l));
        if !found && let Some(p) = self.procs.get_mut(&pid) {
            p.env_read = false;
        }
    }

    /// What predates the trace of a process seen for the first time: its
    /// address space, when CUDA state (NVIDIA device mappings) is there.
    pub(super) fn first_sight(&mut self, pid: u32) {
        if let Some(space) = self.source.space(pid) {
            self.note(Fact::Space {
                pid,
                space: space.clone(),
            });
            self.registry.set_before(pid, Some(space));
        }
    }

    /// Reads the environment of `pid` if not read since its last exec.
    pub(super) fn read_env(&mut self, pid: u32) {
        if self.procs.get(&pid).is_some_and(|p| p.env_read) {
            return;
        }
        let env = self.source.env(pid);
        self.note(Fact::Env { pid, env: env.clone() });
        let p = self.procs.entry(pid).or_default();
        p.env = env;
        p.env_read = true;
    }

    /// Samples the per-process counters of live processes (every tick).
    pub fn sample(&mut self) {
        self.observe(|| Input::Tick);
        self.sample_live();
    }

    /// Traced processes not known to have exited.
    pub fn live_pids(&self) -> Vec<u32> {
        self.procs
            .iter()
            .filter(|(_, p)| !p.exited)
            .map(|(pid, _)| *pid)
            .collect()
    }

    fn sample_live(&mut self) {
        let live = self.live_pids();
        for pid in live {
            let (kib, cpu) = self.source.sample(pid);
            self.note(Fact::Sample {
                pid,
                vm_pin_kib: kib,
                cpu_seconds: cpu,
            });
            let Some(p) = self.procs.get_mut(&pid) else { continue };
            if let Some(kib) = kib {
                p.vm_pin_kib_max = p.vm_pin_kib_max.max(kib);
            }
            if let Some(cpu) = cpu {
                p.cpu_seconds = Some(cpu);
            }
        }
    }

    /// The set-up uprobe links were closed: context switches are no longer
    /// seen, so the registry stops trusting a thread's last context where a
    /// process has several.
    pub fn setup_closed(&mut self) {
        self.observe(|| Input::SetupClosed);
        self.registry.contexts_frozen = true;
        self.ucx.setup_closed();
    }

    /// Drops everything kept about an exited process (its row, registry,
    /// pending pins and copy pairs), so a long-running agent's memory stays
    /// flat as processes come and go (`gdrtrace serve`). Totals per
    /// operation and transfer group keep what it did.
    pub fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
        self.registry.procs.remove(&pid);
        self.pending_pins.retain(|t, _| t.pid != pid);
        self.pairs.forget(pid);
        self.collectives.retain(|(p, _, _), _| *p != pid);
        self.collectives_counted.retain(|(p, _, _), _| *p != pid);
        self.copies.forget(pid);
        self.estimator.forget(pid);
        self.exiting.remove(&pid);
        self.credited.remove(&pid);
        self.windows.forget(pid);
        self.io.retain(|(p, _, _), _| *p != pid);
        self.io_counted.retain(|(p, _, _), _| *p != pid);
        self.p2pdma.remove(&pid);
        self.gds.forget(pid);
    }

    /// A process is gone: once the duty cycle has run, the interval it
    /// exited in counts it still ([`Aggregator::duty`]), and its gaps close
    /// after it.
    fn exited(&mut self, pid: u32) {
        self.estimator.gone(pid);
        if self.duty.on_us + self.duty.off_us > 0 {
            self.exiting.insert(pid);
        } else {
            self.estimator.exited(pid);
        }
    }

    /// Marks processes that no longer exist as exited; true when none is left.
    pub fn check_exited(&mut self) -> bool {
        self.observe(|| Input::AliveCheck);
        let live = self.live_pids();
        for pid in live {
            if !self.source.alive(pid) {
                self.note(Fact::Gone { pid });
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.exited = true;
                }
                self.exited(pid);
            }
        }
        self.procs.values().all(|p| p.exited)
    }

    pub fn push(&mut self, e: &Event) {
        self.observe(|| Input::Event(*e));
        self.events += 1;
        if let Some(t) = &mut self.timeline {
            t.thread(e);
        }
        match e.kind {
            kind::FORK => {
                let child = e.args[0] as u32;
                // Threads share the tgid; only new processes get a row.
                if let Some(l) = self.source.look_child(child) {
                    self.note(Fact::Process {
                        pid: child,
                        parent: Some(e.pid),
                        comm: l.comm.clone(),
                        env: l.env.clone(),
                    });
                    self.add_looked(child, Some(e.pid), Some(l));
                }
            }
            kind::EXEC => {
                self.registry.exec(e.pid);
                let p = self.procs.entry(e.pid).or_default();
                p.comm = comm_of(e);
                p.env_read = false;
                self.read_env(e.pid);
            }
            kind::EXIT => {
                self.sample_live();
                let p = self.procs.entry(e.pid).or_default();
                p.exited = true;
                // Per-call records carry no name: a process that was gone
                // before procfs could name it is named by its exit record.
                if p.comm.is_empty() {
                    p.comm = comm_of(e);
                }
                self.exited(e.pid);
            }
            kind::CALL | kind::ENTRY => {
                self.call(e);
            }
            kind::ROW_FIRST => self.row_first(e),
            _ => self.undecoded += 1,
        }
    }

    /// The first call of a copy row (`kind::ROW_FIRST`): a call like any
    /// other, whose verdict the row's later calls share.
    fn row_first(&mut self, e: &Event) {
        let handle = e.ret as u64;
        let first = Event {
            kind: kind::CALL,
            ret: 0,
            ..*e
        };
        if let Some(c) = self.call(&first) {
            let class = self.copies.first(e.pid, e.op, handle, first, &c);
            self.estimator.row_began(&class, e.start_ns);
        }
    }
}
