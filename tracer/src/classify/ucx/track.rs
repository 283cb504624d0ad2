//! The UCX tracker: the evidence of every process, event by event.
use super::*;

impl Tracker {
    /// The first call of an aggregated row (`op_flags::SAMPLE_FIRST`): what
    /// its buffer argument points at.
    pub fn sample(&mut self, e: &Event, registry: &Registry) {
        let Some((_, row)) = uapi::row_of(e.op) else { return };
        let Some((count, _, handle)) = row.coll else { return };
        let Some(buffer) = (count as usize).checked_sub(1) else {
            return;
        };
        let backing = registry.backing(e.pid, e.args[buffer]);
        let key = (row.name, e.args.get(handle as usize).copied().unwrap_or(0));
        self.procs
            .entry(e.pid)
            .or_default()
            .samples
            .entry(key)
            .or_insert(backing);
    }

    /// The set-up links were closed: lookups are no longer seen.
    pub fn setup_closed(&mut self) {
        self.setup_closed = true;
    }

    /// A completed call (after the registry saw it).
    pub fn observe(&mut self, e: &Event, transport: Transport, registry: &Registry) {
        if e.kind != kind::CALL {
            return;
        }
        let Some((_, row)) = uapi::row_of(e.op) else { return };
        let ok = e.ret == 0;
        if row.kind == Kind::Copy {
            if ok && let Some(bytes) = copy_bytes(e, row) {
                self.copy(e, row, transport, registry, 1, bytes as i64);
            }
            return;
        }
        if !matches!(row.lib, Lib::Ucp | Lib::Uct | Lib::Ucs) {
            return;
        }
        let s = self.procs.entry(e.pid).or_default();
        match row.kind {
            Kind::UcxWorker if ok => s.workers += 1,
            Kind::UcxEndpoint if ok => s.endpoints += 1,
            Kind::UcxMemMap if ok => s.mem_maps += 1,
            Kind::UcxMemUnmap if ok => s.mem_unmaps += 1,
            Kind::UcxMdReg if ok => {
                // 1.22's uct_md_mem_reg calls uct_md_mem_reg_v2: the inner
                // call returns first with the same handle.
                let memh = e.args[4];
                if s.last_reg
                    .get(&e.tid)
                    .is_some_and(|(h, start)| *h == memh && e.start_ns <= *start)
                {
                    return;
                }
                s.last_reg.insert(e.tid, (memh, e.start_ns));
                s.regs += 1;
                s.reg_bytes += e.args[2];
                *s.regs_by_memory
                    .entry(memory_of(registry.backing(e.pid, e.args[1])))
                    .or_default() += 1;
            }
            Kind::UcxMdDereg if ok => s.deregs += 1,
            Kind::UcxRegionInsert => {
                let v = s.inserts.entry(e.tid).or_default();
                if v.len() >= PENDING {
                    v.remove(0);
                }
                v.push(e.start_ns);
            }
            Kind::UcxRcacheGet => {
                s.gets += 1;
                let (start, end) = (e.start_ns, e.start_ns + e.dur_ns);
                let inside = s
                    .inserts
                    .get_mut(&e.tid)
                    .map(|v| {
                        let n = v.iter().filter(|t| (start..=end).contains(*t)).count();
                        v.retain(|t| !(start..=end).contains(t));
                        n
                    })
                    .unwrap_or(0);
                if inside > 0 {
                    s.misses += 1;
                    let range = (e.args[1], e.args[2]);
                    if s.missed.contains(&range) {
                        s.repeat_misses += 1;
                    } else if s.missed.len() < MISSED {
                        s.missed.insert(range);
                    }
                }
            }
            _ => {}
        }
    }

    /// `calls` successful copies of one copy class (the kernel counted
    /// them; negative where an estimate came down), `bytes` in all, like
    /// the class's first call `e`.
    pub fn observe_many(&mut self, e: &Event, transport: Transport, registry: &Registry, calls: i64, bytes: i64) {
        if let Some((_, row)) = uapi::row_of(e.op)
            && row.kind == Kind::Copy
            && copy_bytes(e, row).is_some()
        {
            self.copy(e, row, transport, registry, calls, bytes);
        }
    }

    fn copy(&mut self, e: &Event, row: &uapi::Row, transport: Transport, registry: &Registry, calls: i64, bytes: i64) {
        let gpu = |a: u64| matches!(registry.backing(e.pid, a), Backing::Gpu { .. });
        let name = row.name;
        let peer = row.peer_copy();
        let add = |v: &mut u64| *v = v.saturating_add_signed(bytes);
        let c = &mut self.procs.entry(e.pid).or_default().copies;
        c.calls = c.calls.saturating_add_signed(calls);
        // The API names the direction; unified copies need the registry.
        if peer || name.contains("DtoD") {
            add(&mut c.gpu_gpu_bytes);
        } else if name.contains("HtoD") || name.contains("DtoH") {
            add(&mut c.gpu_host_bytes);
        } else {
            match (gpu(e.args[0]), gpu(e.args[1])) {
                (true, true) => add(&mut c.gpu_gpu_bytes),
                (true, false) | (false, true) => add(&mut c.gpu_host_bytes),
                (false, false) => {
                    add(&mut c.unknown_bytes);
                    return;
                }
            }
        }
        if transport == Transport::HostStaged && !(peer || name.contains("DtoD")) {
            add(&mut c.already_staged_bytes);
        }
    }
}

/// The size of one copy, where its arguments hold it (not 2D/3D copies,
/// whose size is behind a descriptor pointer).
fn copy_bytes(e: &Event, row: &uapi::Row) -> Option<u64> {
    let sized = row.args.len() >= 3 && row.args[2] == Arg::Bytes;
    if row.peer_copy() {
        Some(e.args[4])
    } else if sized {
        Some(e.args[2])
    } else {
        None
    }
}
