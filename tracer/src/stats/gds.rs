//! The cuFile side of the aggregate: libcufile's calls into the tracker,
//! the kernel's rows of cuFile reads and writes (per handle) and of the
//! file I/O and ioctls of cuFile processes (per fd, each fd's file read
//! from `/proc` once and recorded as a fact), and the report's `gds`
//! section built from them. Paths are decided later, by the judge.
use std::collections::BTreeMap;

use tracer_common::Event;

use super::{Aggregator, source::Fact};
use crate::{
    classify::gds::{self, FileIo, GdsProcess, GdsReport, Handle, Io},
    probes::{
        catalog,
        ops::op_code,
        uapi::{self, Kind, Lib},
    },
};

impl Aggregator {
    /// A libcufile call (after the registry and the classifier saw it):
    /// the file behind a handle's fd, the process's cufile.json once, and
    /// the call into the tracker.
    pub(super) fn cufile_call(&mut self, e: &Event) {
        let Some((_, row)) = uapi::row_of(e.op) else { return };
        if row.lib != Lib::Cufile {
            return;
        }
        self.cufile_process(e.pid);
        if row.kind == Kind::CufileHandleRegister && row.succeeded(e.ret) {
            // Registered now: read again, the fd may have been reused.
            self.resolve_fd(e.pid, e.args[5] as i32);
        }
        self.gds.observe(e);
    }

    /// A process that uses libcufile: its configuration, read once.
    pub(super) fn cufile_process(&mut self, pid: u32) {
        self.gds.seen(pid);
        if self.gds.has_config(pid) {
            return;
        }
        let env = self.procs.get(&pid).map(|p| p.env.clone()).unwrap_or_default();
        let config = self.source.cufile_config(pid, &env);
        self.note(Fact::Cufile {
            pid,
            config: config.clone(),
        });
        self.gds.set_config(pid, config);
    }

    /// The file behind `fd` of `pid`, from the process source (recorded).
    fn resolve_fd(&mut self, pid: u32, fd: i32) {
        let file = self.source.file(pid, fd);
        self.note(Fact::File {
            pid,
            fd,
            file: file.clone(),
        });
        self.gds.set_fd(pid, fd, file);
    }

    /// After a tick's rows: a process with cuFile rows is a cuFile process,
    /// and the fds of its file I/O and ioctls are read once.
    pub(super) fn io_rows_tick(&mut self) {
        let cufile: Vec<u32> = self
            .io_counted
            .keys()
            .filter(|(_, op, _)| gds::is_io_op(op))
            .map(|(pid, _, _)| *pid)
            .collect();
        for pid in cufile {
            self.cufile_process(pid);
        }
        let unknown: Vec<(u32, i32)> = self
            .io_counted
            .keys()
            .filter(|(pid, op, _)| !gds::is_io_op(op) && self.gds.uses_cufile(*pid))
            .map(|(pid, _, fd)| (*pid, *fd as i32))
            .filter(|(pid, fd)| !self.gds.knows_fd(*pid, *fd))
            .collect();
        for (pid, fd) in unknown {
            self.resolve_fd(pid, fd);
        }
    }

    /// A cuFile process's cumulative file I/O per file ([read, write]
    /// bytes) and nvidia-fs ioctls, estimated where sampled.
    pub(super) fn file_totals(&self, pid: u32) -> (BTreeMap<String, [u64; 2]>, u64) {
        let mut files: BTreeMap<String, [u64; 2]> = BTreeMap::new();
        let mut nvfs = 0;
        if !self.gds.uses_cufile(pid) {
            return (files, nvfs);
        }
        for ((p, op, fd), (calls, bytes)) in &self.io {
            if *p != pid {
                continue;
            }
            let Some(code) = op_code(op) else { continue };
            let fd = *fd as i32;
            if let Some(write) = catalog::file_direction(code) {
                files.entry(self.gds.key_of(pid, fd)).or_default()[write as usize] += bytes;
            } else if code == tracer_common::op::IOCTL && self.gds.nvfs_fd(pid, fd) {
                nvfs += calls;
            }
        }
        (files, nvfs)
    }
}

/// The `gds` section: every process that used libcufile (None: none did).
pub fn report(agg: &Aggregator) -> Option<GdsReport> {
    let processes: Vec<GdsProcess> = agg.gds.procs.keys().filter_map(|pid| process(agg, *pid)).collect();
    (!processes.is_empty()).then_some(GdsReport { processes, log: None })
}

fn process(agg: &Aggregator, pid: u32) -> Option<GdsProcess> {
    let s = agg.gds.procs.get(&pid)?;
    let hex = |h: u64| format!("{h:#x}");
    let mut io: Vec<Io> = Vec::new();
    let mut files: BTreeMap<String, FileIo> = BTreeMap::new();
    for ((p, op, handle), (calls, bytes)) in &agg.io {
        if *p != pid {
            continue;
        }
        if gds::is_io_op(op) {
            let row = uapi::row_named(op);
            let name = row.map_or("", |r| r.name);
            io.push(Io {
                op: op.clone(),
                handle: hex(*handle),
                calls: *calls,
                bytes: *bytes,
                failed: s.failed.get(&(name, *handle)).copied().unwrap_or(0),
                sample: s.samples.get(&(name, *handle)).cloned(),
            });
            continue;
        }
        let Some(code) = op_code(op) else { continue };
        let fd = *handle as i32;
        let key = agg.gds.key_of(pid, fd);
        let nvfs = agg.gds.nvfs_fd(pid, fd);
        let direction = catalog::file_direction(code);
        // Ioctls matter on nvidia-fs devices only (CUDA's own go to /dev/nvidia*).
        if direction.is_none() && !nvfs {
            continue;
        }
        let f = files.entry(key.clone()).or_insert_with(|| FileIo {
            key,
            file: s.fds.get(&fd).cloned().flatten(),
            ..FileIo::default()
        });
        if !f.fds.contains(&fd) {
            f.fds.push(fd);
        }
        match direction {
            Some(false) => {
                f.read_calls += calls;
                f.read_bytes += bytes;
            }
            Some(true) => {
                f.write_calls += calls;
                f.write_bytes += bytes;
            }
            None => f.ioctls += calls,
        }
    }
    // Failed calls of rows the kernel never summed (every call failed).
    for ((name, handle), n) in &s.failed {
        if !io.iter().any(|x| x.op == *name && x.handle == hex(*handle)) {
            io.push(Io {
                op: name.to_string(),
                handle: hex(*handle),
                failed: *n,
                sample: s.samples.get(&(*name, *handle)).cloned(),
                ..Io::default()
            });
        }
    }
    let handles: Vec<Handle> = s
        .handles
        .iter()
        .map(|(h, (fd, dereg))| Handle {
            handle: hex(*h),
            fd: *fd,
            file: s
                .fds
                .get(fd)
                .map(|f| f.as_ref().map_or_else(|| gds::fd_key(*fd), |f| f.key())),
            deregistered: *dereg,
        })
        .collect();
    // A handle's file is listed even where no positional I/O moved it.
    for h in &handles {
        if let Some(key) = &h.file
            && !files.contains_key(key)
        {
            files.insert(
                key.clone(),
                FileIo {
                    key: key.clone(),
                    file: s.fds.get(&h.fd).cloned().flatten(),
                    fds: vec![h.fd],
                    ..FileIo::default()
                },
            );
        }
    }
    let (bounce_buffers, bounce_bytes) = agg.gds.host_registered(pid);
    let env = agg
        .procs
        .get(&pid)
        .map(|p| {
            p.env
                .iter()
                .filter(|(k, _)| k.starts_with("CUFILE_"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    Some(GdsProcess {
        pid,
        driver_opens: s.driver_opens,
        driver_errors: s.driver_errors.clone(),
        driver_closes: s.driver_closes,
        properties: s.properties,
        handles,
        buffers: s.buffers.clone(),
        io,
        files: files.into_values().collect(),
        bounce_buffers,
        bounce_bytes,
        p2pdma_maps: agg.p2pdma.get(&pid).copied().unwrap_or(0),
        config: s.config.clone().flatten(),
        env,
    })
}
