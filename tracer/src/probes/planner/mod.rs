//! The planner: one attach loop over the catalog. Each point is tried by its
//! strategies in order; the first that loads and attaches wins, and every
//! refusal is kept as evidence (`tried`). Nothing is silently absent: a point
//! that did not attach is `unavailable` with the reason.
use std::{
    collections::{BTreeMap, HashMap, HashSet},
    fs,
    path::Path,
    sync::{Arc, Mutex},
};

use aya::{
    Btf, Ebpf,
    maps::Array,
    programs::{BtfTracePoint, FEntry, FExit, KProbe, RawTracePoint, TracePoint},
};
use tracer_common::OpConfig;

use super::{
    catalog::{CATALOG, Family, ProbePoint, Strategy, Target},
    libs::LibFile,
    symbols::{self, Symbol},
    uapi::{self, Lib},
    uprobes::{self, Point, UprobeLinks},
};
use crate::{error::describe, loader::program};

pub use super::coverage::{Attempt, Coverage, LibAttachment, ProcessLibrary, Status};

mod libraries;
pub use libraries::{INSTALLED_NOT_MAPPED, NOT_INSTALLED, NOT_MAPPED};

/// Attaches catalog points and library files; holds the coverage record.
pub struct Planner {
    btf: Option<&'static Btf>,
    btf_error: Option<String>,
    kallsyms: Option<Arc<HashSet<String>>>,
    kprobes: Result<(), String>,
    pub coverage: Vec<Coverage>,
    /// Library files attached, by (device, inode).
    pub libs: BTreeMap<(u64, u64), LibAttachment>,
    /// Which library files (by identity) each traced process maps.
    pub proc_libs: BTreeMap<u32, std::collections::BTreeSet<(u64, u64)>>,
    /// Processes whose mapped library files grew since the aggregator was
    /// last told their single-stepped rows (`Session::aggregate_tick`).
    pub stepped_dirty: std::collections::BTreeSet<u32>,
    /// UCX transport modules each traced process maps (file names).
    pub proc_modules: BTreeMap<u32, std::collections::BTreeSet<String>>,
    /// The table's configuration is in `OP_CONFIG` (written once).
    configured: Option<Result<(), String>>,
    /// Every uprobe link of the library table.
    pub uprobes: UprobeLinks,
    /// Why the set-up links were closed, once they were.
    pub setup_dropped: Option<String>,
    /// How the sampled rows were traced, once their duty cycle first
    /// closed them (`sampling/controller.rs`): the coverage detail of their files.
    pub sampling_note: Option<String>,
    /// `Exact` rows (symbols) that joined the sampled rows, and why.
    pub exact_joined: BTreeMap<&'static str, String>,
    /// The shared syscall program pairs tried so far (`tp_btf`, then raw
    /// tracepoint), and how each went; at most one is ever attached.
    syscall_pairs: Vec<(Strategy, Result<(), String>)>,
    /// The table's libraries installed on this host (`libs::installed`, as
    /// `doctor` lists them), once looked for: what a library row no traced
    /// process maps says of it.
    pub installed: Option<Vec<(Lib, String)>>,
}

impl Default for Planner {
    fn default() -> Self {
        Self::new()
    }
}

impl Planner {
    pub fn new() -> Self {
        let (btf, btf_error) = match crate::loader::vmlinux_btf() {
            Ok(b) => (Some(b), None),
            Err(e) => (None, Some(e.to_string())),
        };
        Self {
            btf,
            btf_error,
            kallsyms: kallsyms(),
            kprobes: kprobe_support(),
            coverage: Vec::new(),
            libs: BTreeMap::new(),
            proc_libs: BTreeMap::new(),
            stepped_dirty: std::collections::BTreeSet::new(),
            proc_modules: BTreeMap::new(),
            configured: None,
            uprobes: UprobeLinks::new(),
            setup_dropped: None,
            sampling_note: None,
            exact_joined: BTreeMap::new(),
            syscall_pairs: Vec::new(),
            installed: None,
        }
    }

    /// Attaches every catalog point of the enabled families.
    pub fn attach_catalog(&mut self, ebpf: &mut Ebpf, enabled: &dyn Fn(Family) -> bool) {
        for point in CATALOG.iter() {
            if enabled(point.family) {
                self.attach_point(ebpf, point);
            }
        }
    }

    /// Attaches one point by its strategies and keeps its coverage row
    /// (catalog points, and points only some commands attach, such as
    /// `serve`'s discovery). Returns the row.
    pub fn attach_point(&mut self, ebpf: &mut Ebpf, point: &ProbePoint) -> Option<&Coverage> {
        let row = match point.target {
            Target::Tracepoint { category, name } | Target::TracepointOr { category, name, .. } => {
                self.tracepoint(ebpf, point, category, name)
            }
            Target::KernelFn(func) => self.kernel_fn(ebpf, point, func),
            Target::Procfs(path) => procfs_row(point, path),
            // Library rows are filled in by `library_rows` once files are known.
            Target::Library(_) => return None,
        };
        self.coverage.push(row);
        self.coverage.last()
    }

    /// A tracepoint point: syscall rows first through the shared
    /// `sys_enter`/`sys_exit` programs (one dispatch-table entry each; BTF
    /// typed, else raw), then through their own `syscalls:sys_{enter,exit}_X`
    /// pair.
    fn tracepoint(&mut self, ebpf: &mut Ebpf, point: &ProbePoint, category: &str, name: &str) -> Coverage {
        if let Some(cfg) = super::catalog::kernel_config(point.op)
            && let Err(e) = set_op_config(ebpf, point.op, cfg)
        {
            return row(point, Err(e), Vec::new());
        }
        first_strategy(point, |strategy| match (strategy, point.target.kernel_fn()) {
            (Strategy::BtfSyscall | Strategy::RawSyscall, _) => self.syscall_pair(ebpf, strategy, point, name),
            (Strategy::Tracepoint, _) => tracepoint_programs(ebpf, point, category, name),
            (Strategy::Fentry | Strategy::Kprobe, Some(func)) => self.function(ebpf, strategy, func),
            _ => Err("strategy not applicable to tracepoints".into()),
        })
    }

    /// Routes a syscall point through a shared syscall pair: the pair is
    /// loaded and attached once, then the point's number maps to its op.
    /// Only one pair ever carries the rows: a second would count every call
    /// twice.
    fn syscall_pair(
        &mut self,
        ebpf: &mut Ebpf,
        strategy: Strategy,
        point: &ProbePoint,
        name: &str,
    ) -> Result<(), String> {
        let nr = super::catalog::syscall_nr(name).ok_or_else(|| format!("{name} is not a known syscall"))?;
        if let Some((live, _)) = self.syscall_pairs.iter().find(|(s, r)| *s != strategy && r.is_ok()) {
            return Err(format!("the {} pair carries the syscall rows", live.name()));
        }
        let tried = match self.syscall_pairs.iter().find(|(s, _)| *s == strategy) {
            Some((_, r)) => r.clone(),
            None => {
                let r = self.attach_syscall_pair(ebpf, strategy);
                self.syscall_pairs.push((strategy, r.clone()));
                r
            }
        };
        tried?;
        let map = ebpf.map_mut("SYSCALL_OPS").ok_or("map SYSCALL_OPS missing")?;
        let mut ops: Array<_, u32> = Array::try_from(map).map_err(|e| describe(&e))?;
        ops.set(nr, &point.op, 0).map_err(|e| describe(&e))
    }

    fn attach_syscall_pair(&self, ebpf: &mut Ebpf, strategy: Strategy) -> Result<(), String> {
        let sides = [("sys_enter", "enter"), ("sys_exit", "exit")];
        let r = if strategy == Strategy::RawSyscall {
            sides.into_iter().try_for_each(|(tp, side)| {
                let p: &mut RawTracePoint = program(ebpf, &format!("raw_sys_{side}"))?;
                p.load().map_err(|e| describe(&e))?;
                p.attach(tp).map(drop).map_err(|e| describe(&e))
            })
        } else {
            let btf = self
                .btf
                .ok_or_else(|| format!("no vmlinux BTF ({})", self.btf_error.as_deref().unwrap_or("?")))?;
            sides.into_iter().try_for_each(|(tp, side)| {
                let p: &mut BtfTracePoint = program(ebpf, &format!("btf_sys_{side}"))?;
                p.load(tp, btf).map_err(|e| describe(&e))?;
                p.attach().map(drop).map_err(|e| describe(&e))
            })
        };
        if r.is_err() {
            // Never half a pair: entries without exits would only fill the
            // in-flight table.
            for (_, side) in sides {
                unload::<RawTracePoint>(ebpf, &format!("raw_sys_{side}"));
                unload::<BtfTracePoint>(ebpf, &format!("btf_sys_{side}"));
            }
        }
        r
    }

    fn kernel_fn(&mut self, ebpf: &mut Ebpf, point: &ProbePoint, func: &str) -> Coverage {
        if let Some(syms) = &self.kallsyms
            && !syms.contains(func)
        {
            return row(point, Err(NOT_IN_KALLSYMS.into()), Vec::new());
        }
        first_strategy(point, |strategy| self.function(ebpf, strategy, func))
    }

    /// A kernel function by one strategy (fentry/fexit or kprobe/kretprobe).
    fn function(&mut self, ebpf: &mut Ebpf, strategy: Strategy, func: &str) -> Result<(), String> {
        if self.kallsyms.as_ref().is_some_and(|syms| !syms.contains(func)) {
            return Err(format!("{func}: {NOT_IN_KALLSYMS}"));
        }
        match strategy {
            Strategy::Fentry => self.fentry(ebpf, func),
            Strategy::Kprobe => self.kprobe(ebpf, func),
            _ => Err("strategy not applicable to kernel functions".into()),
        }
    }

    fn fentry(&mut self, ebpf: &mut Ebpf, func: &str) -> Result<(), String> {
        let Some(btf) = self.btf else {
            return Err(format!("no vmlinux BTF ({})", self.btf_error.as_deref().unwrap_or("?")));
        };
        let entry = format!("fentry_{func}");
        let exit = format!("fexit_{func}");
        let r = (|| -> Result<(), String> {
            let p: &mut FEntry = program(ebpf, &entry)?;
            p.load(func, btf).map_err(|e| describe(&e))?;
            p.attach().map_err(|e| describe(&e))?;
            let p: &mut FExit = program(ebpf, &exit)?;
            p.load(func, btf).map_err(|e| describe(&e))?;
            p.attach().map_err(|e| describe(&e))?;
            Ok(())
        })();
        if r.is_err() {
            // Never leave half a pair: entries without returns would only
            // fill the in-flight table.
            unload::<FEntry>(ebpf, &entry);
            unload::<FExit>(ebpf, &exit);
        }
        r
    }

    fn kprobe(&mut self, ebpf: &mut Ebpf, func: &str) -> Result<(), String> {
        self.kprobes.clone()?;
        let entry = format!("kprobe_{func}");
        let exit = format!("kretprobe_{func}");
        let r = (|| -> Result<(), String> {
            for name in [&entry, &exit] {
                let p: &mut KProbe = program(ebpf, name)?;
                p.load().map_err(|e| describe(&e))?;
                p.attach(func, 0).map_err(|e| describe(&e))?;
            }
            Ok(())
        })();
        if r.is_err() {
            unload::<KProbe>(ebpf, &entry);
            unload::<KProbe>(ebpf, &exit);
        }
        r
    }

    /// Writes every table row's configuration (flags, out-pointers) into
    /// `OP_CONFIG`, once.
    pub(crate) fn configure_table(&mut self, ebpf: &mut Ebpf) -> Result<(), String> {
        if let Some(r) = &self.configured {
            return r.clone();
        }
        let r = uapi::TABLE
            .iter()
            .enumerate()
            .try_for_each(|(i, row)| set_op_config(ebpf, uapi::op_of(i), uapi::config_of(row)));
        self.configured = Some(r.clone());
        r
    }

    /// Moves the `Exact` ops `ops` to the sampled rows for good (they went
    /// hot: `why`): the kernel counts them in on phases only from now on,
    /// and their points are attached with the next one. Returns their old
    /// links for the caller to close.
    pub fn join_sampled(
        &mut self,
        ebpf: &mut Ebpf,
        ops: &std::collections::BTreeSet<u32>,
        why: String,
    ) -> Vec<aya::programs::uprobe::UProbeLink> {
        for op in ops {
            if let Some((_, row)) = uapi::row_of(*op) {
                let mut cfg = uapi::config_of(row);
                cfg.flags |= tracer_common::op_flags::SAMPLED;
                if let Err(e) = set_op_config(ebpf, *op, cfg) {
                    log::warn!("sampling {}: {e}", row.name);
                }
                self.exact_joined.insert(row.symbol, why.clone());
            }
        }
        self.uprobes.promote(ebpf, ops).0
    }

    /// The full coverage table: catalog rows plus library rows.
    pub fn table(&self) -> Vec<Coverage> {
        let mut rows = self.coverage.clone();
        rows.extend(self.library_rows());
        rows
    }
}

const NOT_IN_KALLSYMS: &str = "not in /proc/kallsyms (absent, renamed or inlined in this kernel)";

/// Tries a point's strategies in order: the first that attaches wins, and
/// every refusal before it is kept.
fn first_strategy(point: &ProbePoint, mut attach: impl FnMut(Strategy) -> Result<(), String>) -> Coverage {
    let mut tried = Vec::new();
    for strategy in point.strategies {
        match attach(*strategy) {
            Ok(()) => return row(point, Ok(*strategy), tried),
            Err(e) => tried.push(Attempt {
                strategy: strategy.name(),
                error: e,
            }),
        }
    }
    let reason = tried
        .iter()
        .map(|a| format!("{}: {}", a.strategy, a.error))
        .collect::<Vec<_>>()
        .join("; ");
    row(point, Err(reason), tried)
}

fn row(point: &ProbePoint, result: Result<Strategy, String>, tried: Vec<Attempt>) -> Coverage {
    let (status, via, reason) = match result {
        Ok(s) => (Status::Attached, Some(s.name()), None),
        Err(e) => (Status::Unavailable, None, Some(e)),
    };
    Coverage {
        point: point.name.to_string(),
        family: point.family,
        status,
        via,
        reason,
        tried,
        detail: Vec::new(),
    }
}

fn procfs_row(point: &ProbePoint, path: &str) -> Coverage {
    let check = path.replace("PID", "self");
    let ok = fs::read_to_string(&check).map(|text| match point.name {
        "vmstat:nr_foll_pin" => text.contains("nr_foll_pin_acquired"),
        "status:VmPin" => text.contains("VmPin:"),
        _ => true,
    });
    let result = match ok {
        Ok(true) => Ok(Strategy::Procfs),
        Ok(false) => Err(format!("{check} lacks the counter on this kernel")),
        Err(e) => Err(format!("{check}: {e}")),
    };
    row(point, result, Vec::new())
}

fn unload<'a, T>(ebpf: &'a mut Ebpf, name: &str)
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
    T: Unload + 'a,
{
    if let Ok(p) = program::<T>(ebpf, name) {
        p.unload_quietly();
    }
}

/// Unloading a program that may not be loaded.
trait Unload {
    fn unload_quietly(&mut self);
}
macro_rules! impl_unload {
    ($($t:ty),*) => {$(impl Unload for $t {
        fn unload_quietly(&mut self) {
            let _ = self.unload();
        }
    })*};
}
impl_unload!(FEntry, FExit, KProbe, RawTracePoint, BtfTracePoint);

/// Writes one op's eBPF-side configuration into `OP_CONFIG`.
fn set_op_config(ebpf: &mut Ebpf, op: u32, cfg: OpConfig) -> Result<(), String> {
    let map = ebpf.map_mut("OP_CONFIG").ok_or("map OP_CONFIG missing")?;
    let mut configs: Array<_, OpConfig> = Array::try_from(map).map_err(|e| describe(&e))?;
    configs.set(op, &cfg, 0).map_err(|e| describe(&e))
}

/// A point's own tracepoint programs: each program of a pair attaches to
/// its own tracepoint (sys_enter_X / sys_exit_X) and is named after it.
fn tracepoint_programs(ebpf: &mut Ebpf, point: &ProbePoint, category: &str, name: &str) -> Result<(), String> {
    check_fields(point, category, name)?;
    point.programs.iter().try_for_each(|prog| {
        let tp_name = if point.programs.len() > 1 { *prog } else { name };
        attach_tracepoint(ebpf, prog, category, tp_name)
    })
}

/// Whether this kernel's record of the tracepoint has the fields the
/// point's programs read where they read them (`ProbePoint::fields`).
fn check_fields(point: &ProbePoint, category: &str, name: &str) -> Result<(), String> {
    if point.fields.is_empty() {
        return Ok(());
    }
    let path = crate::loader::tracefs()
        .map_err(|e| e.to_string())?
        .join("events")
        .join(category)
        .join(name)
        .join("format");
    let format = fs::read_to_string(&path).map_err(|e| format!("no tracepoint {category}/{name} ({e})"))?;
    fields_agree(&format, point.fields).map_err(|e| format!("{category}/{name}: {e}"))
}

/// `fields` against a tracepoint's format text.
pub(crate) fn fields_agree(format: &str, fields: &[(&str, u32)]) -> Result<(), String> {
    for (field, at) in fields {
        match crate::loader::parse_field_offset(format, field) {
            Some(o) if o == *at => {}
            Some(o) => {
                return Err(format!(
                    "field {field} is at byte {o} on this kernel, the program reads byte {at}"
                ));
            }
            None => return Err(format!("no field {field} on this kernel")),
        }
    }
    Ok(())
}

fn attach_tracepoint(ebpf: &mut Ebpf, prog: &str, category: &str, name: &str) -> Result<(), String> {
    crate::loader::tracefs().map_err(|e| e.to_string())?;
    let p: &mut TracePoint = program(ebpf, prog)?;
    p.load().map_err(|e| describe(&e))?;
    p.attach(category, name).map_err(|e| describe(&e))?;
    Ok(())
}

/// [`read_kallsyms`], read again only when the loaded modules changed
/// (their functions come and go with them): a second session of the
/// process (the calibration's) takes the first one's set.
fn kallsyms() -> Option<Arc<HashSet<String>>> {
    /// The modules loaded when the set was read, and the set.
    type Read = (String, Option<Arc<HashSet<String>>>);
    static LAST: Mutex<Option<Read>> = Mutex::new(None);
    let modules: String = fs::read_to_string("/proc/modules")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect::<Vec<_>>()
        .join(" ");
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((m, set)) = last.as_ref()
        && *m == modules
    {
        return set.clone();
    }
    let set = read_kallsyms().map(Arc::new);
    *last = Some((modules, set.clone()));
    set
}

/// Function names in /proc/kallsyms (module functions included), or None if
/// it cannot be read.
fn read_kallsyms() -> Option<HashSet<String>> {
    let text = fs::read_to_string("/proc/kallsyms").ok()?;
    let set: HashSet<String> = text
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let _addr = it.next()?;
            let ty = it.next()?;
            let name = it.next()?;
            matches!(ty, "t" | "T" | "w" | "W").then(|| name.to_string())
        })
        .collect();
    (!set.is_empty()).then_some(set)
}

/// Whether this kernel can create kprobes at all.
pub fn kprobe_support() -> Result<(), String> {
    if Path::new("/sys/bus/event_source/devices/kprobe/type").exists() {
        return Ok(());
    }
    let legacy = crate::loader::tracefs()
        .map(|t| t.join("kprobe_events").exists())
        .unwrap_or(false);
    if legacy {
        Ok(())
    } else {
        Err("no kprobe support in this kernel (no kprobe PMU, no kprobe_events; CONFIG_KPROBES off)".into())
    }
}
