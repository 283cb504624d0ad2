//! Where the aggregator learns facts about processes that events do not
//! carry (command name, environment, pinned memory, CPU time, whether a task
//! is a process or a thread, whether it is still alive, its TCP
//! connections): `/proc` while tracing, the recording's fact lines on replay.
use std::{cell::RefCell, collections::BTreeMap, rc::Rc};

use serde::{Deserialize, Serialize};

use crate::{counters, model::AddressSpace};

/// One process-facts answer, as the live source gave it and as a recording
/// holds it (a line with `"type"` set to the variant's name).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Fact {
    /// A process seen for the first time: its name, parent and filtered environment.
    Process {
        pid: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        comm: Option<String>,
        #[serde(default)]
        env: BTreeMap<String, String>,
    },
    /// The environment read after exec (or on the process's first call).
    Env {
        pid: u32,
        #[serde(default)]
        env: BTreeMap<String, String>,
    },
    /// Per-process counters (`VmPin`, CPU time), written when they changed.
    Sample {
        pid: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        vm_pin_kib: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cpu_seconds: Option<f64>,
    },
    /// The process no longer exists (checked by `attach` to stop).
    Gone { pid: u32 },
    /// Its address space when first seen, written only when NVIDIA devices
    /// were mapped then: its CUDA state predates the trace (attach).
    Space { pid: u32, space: AddressSpace },
    /// The file behind an fd of a cuFile process (`/proc/PID/fd`,
    /// `fdinfo`, `mountinfo`), when its I/O or a handle registration first
    /// named it; None when it could not be read (closed, or the process gone).
    File {
        pid: u32,
        fd: i32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file: Option<crate::counters::OpenFile>,
    },
    /// cuFile's configuration for a process (`cufile.json`), at its first
    /// libcufile call; None when no file was found.
    Cufile {
        pid: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        config: Option<crate::classify::gds::CufileConfig>,
    },
    /// Its established TCP connections, read once where one of its NCCL
    /// communicators had no identity (`identity::connections`).
    Connections {
        pid: u32,
        #[serde(default)]
        connections: Vec<crate::identity::Connection>,
    },
}

impl Fact {
    pub fn pid(&self) -> u32 {
        match self {
            Fact::Process { pid, .. }
            | Fact::Env { pid, .. }
            | Fact::Sample { pid, .. }
            | Fact::Gone { pid }
            | Fact::Space { pid, .. }
            | Fact::File { pid, .. }
            | Fact::Cufile { pid, .. }
            | Fact::Connections { pid, .. } => *pid,
        }
    }
}

/// What a process looks like at first sight.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Look {
    pub comm: Option<String>,
    pub env: BTreeMap<String, String>,
    /// Its parent, for a process first seen by what it does (`attach --all`).
    pub parent: Option<u32>,
}

/// The questions the aggregator asks about processes.
pub trait ProcSource: std::fmt::Debug {
    /// Name and environment of a process being added.
    fn look(&mut self, pid: u32) -> Look;
    /// A new task from `sched_process_fork`: `Some` when it is a process
    /// (its own thread-group leader), `None` for a thread.
    fn look_child(&mut self, child: u32) -> Option<Look>;
    /// The filtered environment (`NCCL_*`, `CUDA_*`, `UCX_*`, `NVSHMEM_*`).
    fn env(&mut self, pid: u32) -> BTreeMap<String, String>;
    /// `VmPin` (KiB) and CPU seconds, when readable.
    fn sample(&mut self, pid: u32) -> (Option<u64>, Option<f64>);
    /// Whether the process still exists.
    fn alive(&mut self, pid: u32) -> bool;
    /// NVLink between the GPUs (host fact; None when unknown).
    fn nvlink(&mut self) -> Option<bool>;
    /// The address space of a process seen for the first time, when it has
    /// NVIDIA devices mapped (`/proc/PID/maps`, VmPin).
    fn space(&mut self, pid: u32) -> Option<AddressSpace>;
    /// The file behind `fd` of `pid`, while it is open.
    fn file(&mut self, pid: u32, fd: i32) -> Option<crate::counters::OpenFile>;
    /// cuFile's configuration for `pid` (its environment given): the
    /// `cufile.json` it reads, seen through its mount namespace.
    fn cufile_config(&mut self, pid: u32, env: &BTreeMap<String, String>)
    -> Option<crate::classify::gds::CufileConfig>;
    /// Its established TCP connections (`/proc/PID/fd`, `/proc/PID/net/tcp*`).
    fn connections(&mut self, pid: u32) -> Vec<crate::identity::Connection>;
}

/// The live source: `/proc`.
#[derive(Debug, Default)]
pub struct LiveProc;

impl ProcSource for LiveProc {
    fn look(&mut self, pid: u32) -> Look {
        Look {
            comm: counters::comm(pid),
            env: counters::comm_env(pid),
            parent: counters::ppid(pid),
        }
    }

    fn look_child(&mut self, child: u32) -> Option<Look> {
        // Threads share the tgid; only new processes get a row. A task
        // gone before procfs said which it was is no row here: a process
        // is named by its exit record, a thread has none (an unnamed row
        // was a short-lived thread's, under `attach --all`).
        if counters::tgid(child) != Some(child) {
            return None;
        }
        Some(self.look(child)).filter(|l| l.comm.is_some())
    }

    fn env(&mut self, pid: u32) -> BTreeMap<String, String> {
        counters::comm_env(pid)
    }

    fn sample(&mut self, pid: u32) -> (Option<u64>, Option<f64>) {
        (counters::vm_pin_kib(pid), counters::cpu_seconds(pid))
    }

    fn alive(&mut self, pid: u32) -> bool {
        // A zombie is listed in /proc until its parent reaps it, which a
        // parent that is not traced may never do.
        counters::running(pid)
    }

    fn nvlink(&mut self) -> Option<bool> {
        crate::topo::discover().nvlink()
    }

    fn space(&mut self, pid: u32) -> Option<AddressSpace> {
        counters::address_space(pid)
    }

    fn file(&mut self, pid: u32, fd: i32) -> Option<crate::counters::OpenFile> {
        counters::open_file(pid, fd)
    }

    fn cufile_config(
        &mut self,
        pid: u32,
        env: &BTreeMap<String, String>,
    ) -> Option<crate::classify::gds::CufileConfig> {
        use crate::classify::gds::config;
        let inside = |p: &str| format!("/proc/{pid}/root{p}");
        let path = config::path_for(env, |p| std::path::Path::new(&inside(p)).exists())?;
        let text = std::fs::read_to_string(inside(&path)).ok()?;
        Some(config::parse(&path, &text))
    }

    fn connections(&mut self, pid: u32) -> Vec<crate::identity::Connection> {
        crate::identity::connections::of_process(pid)
    }
}

/// The replay source: answers from the fact lines that followed the input
/// being replayed (the live source's answers, in the order they were given).
#[derive(Debug, Default, Clone)]
pub struct Recorded {
    /// Shared with the replay loop, which sets it before each input.
    pub pending: Rc<RefCell<Vec<Fact>>>,
    /// The recording's host fact.
    pub nvlink: Option<bool>,
}

impl Recorded {
    fn take(&mut self, pid: u32, want: fn(&Fact) -> bool) -> Option<Fact> {
        let mut pending = self.pending.borrow_mut();
        let i = pending.iter().position(|f| f.pid() == pid && want(f))?;
        Some(pending.remove(i))
    }
}

impl ProcSource for Recorded {
    fn look(&mut self, pid: u32) -> Look {
        match self.take(pid, |f| matches!(f, Fact::Process { .. })) {
            Some(Fact::Process { comm, env, parent, .. }) => Look { comm, env, parent },
            _ => Look::default(),
        }
    }

    fn look_child(&mut self, child: u32) -> Option<Look> {
        match self.take(child, |f| matches!(f, Fact::Process { .. })) {
            Some(Fact::Process { comm, env, parent, .. }) => Some(Look { comm, env, parent }),
            _ => None,
        }
    }

    fn env(&mut self, pid: u32) -> BTreeMap<String, String> {
        match self.take(pid, |f| matches!(f, Fact::Env { .. })) {
            Some(Fact::Env { env, .. }) => env,
            _ => BTreeMap::new(),
        }
    }

    fn sample(&mut self, pid: u32) -> (Option<u64>, Option<f64>) {
        match self.take(pid, |f| matches!(f, Fact::Sample { .. })) {
            Some(Fact::Sample {
                vm_pin_kib,
                cpu_seconds,
                ..
            }) => (vm_pin_kib, cpu_seconds),
            _ => (None, None),
        }
    }

    fn alive(&mut self, pid: u32) -> bool {
        self.take(pid, |f| matches!(f, Fact::Gone { .. })).is_none()
    }

    fn nvlink(&mut self) -> Option<bool> {
        self.nvlink
    }

    fn space(&mut self, pid: u32) -> Option<AddressSpace> {
        match self.take(pid, |f| matches!(f, Fact::Space { .. })) {
            Some(Fact::Space { space, .. }) => Some(space),
            _ => None,
        }
    }

    fn file(&mut self, pid: u32, fd: i32) -> Option<crate::counters::OpenFile> {
        let mut pending = self.pending.borrow_mut();
        let i = pending
            .iter()
            .position(|f| matches!(f, Fact::File { pid: p, fd: d, .. } if *p == pid && *d == fd))?;
        match pending.remove(i) {
            Fact::File { file, .. } => file,
            _ => None,
        }
    }

    fn cufile_config(
        &mut self,
        pid: u32,
        _env: &BTreeMap<String, String>,
    ) -> Option<crate::classify::gds::CufileConfig> {
        match self.take(pid, |f| matches!(f, Fact::Cufile { .. })) {
            Some(Fact::Cufile { config, .. }) => config,
            _ => None,
        }
    }

    fn connections(&mut self, pid: u32) -> Vec<crate::identity::Connection> {
        match self.take(pid, |f| matches!(f, Fact::Connections { .. })) {
            Some(Fact::Connections { connections, .. }) => connections,
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new task gets a row only as a live process with a name: not a
    /// thread, not a task already gone.
    #[test]
    fn a_child_row_is_a_named_process() {
        let mut live = LiveProc;
        let me = std::process::id();
        assert_eq!(live.look_child(me).and_then(|l| l.comm), counters::comm(me));
        let (tx, rx) = std::sync::mpsc::channel();
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let _ = wait.recv();
        });
        let tid = rx.recv().unwrap();
        assert!(live.look_child(tid).is_none(), "thread {tid} got a row");
        done.send(()).unwrap();
        t.join().unwrap();
        assert!(live.look_child(u32::MAX - 1).is_none());
    }
}
