//! `gdrtrace doctor`: what this host lets the tracer do, found by trying.
use std::{fs, path::Path};

use aya::{
    Btf, Ebpf,
    programs::{
        BtfTracePoint, FEntry, FExit, KProbe, RawTracePoint, TracePoint, UProbe,
        uprobe::{UProbeAttachLocation, UProbeScope},
    },
};
use serde::{Deserialize, Serialize};

use crate::{
    cli::{DoctorArgs, Format},
    error::{Result, describe},
    host::host,
    loader::{self, LoadOptions},
    probes::{
        CATALOG, Planner, Target, libs, symbols,
        uapi::{self, Lib},
        uprobes::Group,
    },
};

/// The kernel function the trial fentry/kprobe programs attach to: present
/// and traceable on every kernel.
const TRIAL_FN: &str = "vfs_read";

/// `doctor --format json` (`gdrtrace.doctor/v1`, docs/formats.md).
#[derive(Debug, Serialize, Deserialize)]
pub struct Kind {
    #[serde(deserialize_with = "crate::intern::str")]
    pub kind: crate::intern::Name,
    pub available: bool,
    /// `ok`, `load failed` or `attach failed`.
    #[serde(deserialize_with = "crate::intern::str")]
    pub result: crate::intern::Name,
    pub error: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Point {
    pub point: String,
    #[serde(deserialize_with = "crate::intern::str")]
    pub family: crate::intern::Name,
    pub target: String,
    pub exists: bool,
    pub found_in: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Doctor {
    #[serde(deserialize_with = "crate::intern::str")]
    pub schema: crate::intern::Name,
    pub kernel: String,
    pub lockdown: String,
    pub btf_vmlinux: bool,
    pub btf_modules: Vec<String>,
    pub tracefs: Option<String>,
    pub program_kinds: Vec<Kind>,
    pub ring_buffer: Kind,
    #[serde(deserialize_with = "crate::intern::vec")]
    pub capabilities: Vec<crate::intern::Name>,
    pub cap_eff: String,
    pub probe_points: Vec<Point>,
    /// The library probe table: each row's link group and traps per call.
    pub probe_table: Vec<TableRow>,
    /// The planner's matrix: which strategy attached per point, and why
    /// the others did not.
    pub coverage: Vec<crate::probes::Coverage>,
    pub usable: bool,
    /// False when BPF is not permitted to this user: the finding, not a
    /// failure of doctor (exit 4, as every command that needs BPF).
    pub permitted: bool,
    pub reason: String,
}

/// One row of the library probe table, as doctor lists it.
#[derive(Debug, Serialize, Deserialize)]
pub struct TableRow {
    #[serde(deserialize_with = "crate::intern::str")]
    pub row: crate::intern::Name,
    #[serde(deserialize_with = "crate::intern::str")]
    pub lib: crate::intern::Name,
    pub group: Group,
    pub traps_per_call: u64,
}

fn probe_table() -> Vec<TableRow> {
    uapi::TABLE
        .iter()
        .map(|r| TableRow {
            row: r.name,
            lib: r.lib.name(),
            group: r.group(),
            traps_per_call: r.traps_per_call(),
        })
        .collect()
}

const CAPS: &[(u32, &str)] = &[
    (21, "CAP_SYS_ADMIN"),
    (19, "CAP_SYS_PTRACE"),
    (24, "CAP_SYS_RESOURCE"),
    (38, "CAP_PERFMON"),
    (39, "CAP_BPF"),
];

fn capabilities() -> (String, Vec<&'static str>) {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let bits = u64::from_str_radix(&hex, 16).unwrap_or(0);
    (
        hex,
        CAPS.iter()
            .filter(|(b, _)| bits & (1 << b) != 0)
            .map(|(_, n)| *n)
            .collect(),
    )
}

fn trial(kind: &'static str, f: impl FnOnce() -> std::result::Result<(), (bool, String)>) -> Kind {
    match f() {
        Ok(()) => Kind {
            kind,
            available: true,
            result: "ok",
            error: None,
        },
        Err((loaded, e)) => Kind {
            kind,
            available: false,
            result: if loaded { "attach failed" } else { "load failed" },
            error: Some(e),
        },
    }
}

fn prog<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> std::result::Result<&'a mut T, (bool, String)>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or((false, format!("program {name} missing")))?
        .try_into()
        .map_err(|e: aya::programs::ProgramError| (false, describe(&e)))
}

fn kinds(ebpf: &mut Ebpf, btf: Option<&Btf>) -> Vec<Kind> {
    let l = |e: aya::programs::ProgramError| (false, describe(&e));
    let a = |e: aya::programs::ProgramError| (true, describe(&e));
    let self_exe = std::env::current_exe().ok();
    let self_offset = self_exe
        .as_deref()
        .and_then(|p| symbols::functions(p).ok())
        .and_then(|syms| {
            syms.into_iter()
                .find(|s| s.name == "gdrtrace_doctor_probe_target")
                .map(|s| s.file_offset)
        });
    let mut uprobe = |name: &str| -> std::result::Result<(), (bool, String)> {
        let (Some(exe), Some(off)) = (self_exe.as_deref(), self_offset) else {
            return Err((false, "cannot resolve the tracer's own probe target".into()));
        };
        let p: &mut UProbe = prog(ebpf, name)?;
        p.load().map_err(l)?;
        p.attach(
            [UProbeAttachLocation::AbsoluteOffset(off)],
            exe,
            UProbeScope::AllProcesses,
        )
        .map_err(a)?;
        Ok(())
    };
    let up = trial("uprobe", || uprobe("doctor_uprobe"));
    let uret = trial("uretprobe", || uprobe("doctor_uretprobe"));
    // One BPF_TRACE_UPROBE_MULTI link (kernels 6.6+): the library table's
    // links are of this kind where it works, per-point perf links elsewhere.
    let multi = trial("uprobe_multi", || {
        match aya::sys::is_uprobe_multi_supported(aya::sys::UProbeMultiFeature::LinkCreation) {
            Ok(true) => uprobe("doctor_uprobe_multi"),
            Ok(false) => Err((false, "no BPF_TRACE_UPROBE_MULTI links in this kernel (6.6+)".into())),
            Err(e) => Err((false, format!("probing for uprobe_multi links: {e}"))),
        }
    });
    let no_btf = || (false, "no vmlinux BTF".to_string());
    vec![
        trial("fentry", || {
            let p: &mut FEntry = prog(ebpf, "doctor_fentry")?;
            p.load(TRIAL_FN, btf.ok_or_else(no_btf)?).map_err(l)?;
            p.attach().map_err(a).map(drop)
        }),
        trial("fexit", || {
            let p: &mut FExit = prog(ebpf, "doctor_fexit")?;
            p.load(TRIAL_FN, btf.ok_or_else(no_btf)?).map_err(l)?;
            p.attach().map_err(a).map(drop)
        }),
        trial("kprobe", || {
            crate::probes::planner::kprobe_support().map_err(|e| (false, e))?;
            let p: &mut KProbe = prog(ebpf, "doctor_kprobe")?;
            p.load().map_err(l)?;
            p.attach(TRIAL_FN, 0).map_err(a).map(drop)
        }),
        trial("kretprobe", || {
            crate::probes::planner::kprobe_support().map_err(|e| (false, e))?;
            let p: &mut KProbe = prog(ebpf, "doctor_kretprobe")?;
            p.load().map_err(l)?;
            p.attach(TRIAL_FN, 0).map_err(a).map(drop)
        }),
        trial("tracepoint", || {
            let p: &mut TracePoint = prog(ebpf, "doctor_tracepoint")?;
            p.load().map_err(l)?;
            p.attach("syscalls", "sys_enter_getpid").map_err(a).map(drop)
        }),
        trial("raw_tracepoint", || {
            let p: &mut RawTracePoint = prog(ebpf, "doctor_raw_tp")?;
            p.load().map_err(l)?;
            p.attach("sys_enter").map_err(a).map(drop)
        }),
        trial("tp_btf", || {
            let p: &mut BtfTracePoint = prog(ebpf, "doctor_tp_btf")?;
            p.load("sys_enter", btf.ok_or_else(no_btf)?).map_err(l)?;
            p.attach().map_err(a).map(drop)
        }),
        up,
        uret,
        multi,
    ]
}

fn points(btf: Option<&Btf>) -> Vec<Point> {
    let kallsyms = fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    let mut index: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    for l in kallsyms.lines() {
        let mut it = l.split_whitespace();
        if let (Some(_), Some(_), Some(name)) = (it.next(), it.next(), it.next()) {
            index.entry(name).or_insert(it.next().unwrap_or("[vmlinux]"));
        }
    }
    let in_kallsyms = |f: &str| index.get(f).map(|m| m.to_string());
    let installed = libs::installed();
    let mut out = Vec::new();
    for p in CATALOG.iter() {
        let (target, exists, found_in) = match p.target {
            Target::KernelFn(f) => {
                let btf_has = btf.is_some_and(|b| b.id_by_type_name_kind(f, aya_obj::btf::BtfKind::Func).is_ok());
                match in_kallsyms(f) {
                    Some(m) => (
                        f.to_string(),
                        true,
                        format!("kallsyms {m}{}", if btf_has { ", vmlinux BTF" } else { "" }),
                    ),
                    None if btf_has => (f.to_string(), true, "vmlinux BTF (not in kallsyms)".into()),
                    None => (f.to_string(), false, "not in kallsyms or vmlinux BTF".into()),
                }
            }
            Target::Tracepoint { category, name } | Target::TracepointOr { category, name, .. } => {
                let ok = loader::tracefs()
                    .map(|t| t.join("events").join(category).join(name).is_dir())
                    .unwrap_or(false);
                match p.target.kernel_fn() {
                    Some(f) if !ok => {
                        let m = in_kallsyms(f);
                        (
                            format!("{category}:{name} or {f}"),
                            m.is_some(),
                            m.map_or_else(
                                || "neither in tracefs nor in kallsyms".into(),
                                |m| format!("not in tracefs; {f} in kallsyms {m}"),
                            ),
                        )
                    }
                    _ => (
                        format!("{category}:{name}"),
                        ok,
                        if ok { "tracefs".into() } else { "not in tracefs".into() },
                    ),
                }
            }
            Target::Procfs(path) => {
                let ok = Path::new(&path.replace("PID", "self")).exists();
                (path.to_string(), ok, "procfs".into())
            }
            Target::Library(lib) => library_point(lib, &installed),
        };
        out.push(Point {
            point: p.name.to_string(),
            family: p.family.name(),
            target,
            exists,
            found_in,
        });
    }
    out
}

fn library_point(lib: Lib, installed: &[libs::LibFile]) -> (String, bool, String) {
    let files: Vec<_> = installed.iter().filter(|f| f.lib == lib).collect();
    if files.is_empty() {
        return (
            lib.stem().to_string(),
            false,
            "not installed (a traced process's own copy is found from /proc/PID/maps)".into(),
        );
    }
    let mut notes = Vec::new();
    let mut any = false;
    for f in files {
        let Ok(syms) = symbols::functions(&f.host_path) else {
            continue;
        };
        let rows: Vec<_> = uapi::TABLE.iter().filter(|r| r.lib == lib).collect();
        let missing: Vec<_> = rows
            .iter()
            .filter(|r| !syms.iter().any(|s| uapi::is_variant(&s.name, r.symbol)))
            .map(|r| r.symbol)
            .collect();
        any |= missing.len() < rows.len();
        notes.push(format!(
            "{}: {}/{} table symbols in .dynsym{}",
            f.path,
            rows.len() - missing.len(),
            rows.len(),
            if missing.is_empty() {
                String::new()
            } else {
                format!(" (missing: {})", missing.join(", "))
            }
        ));
    }
    (lib.stem().to_string(), any, notes.join("; "))
}

pub fn collect() -> Doctor {
    let h = host();
    let btf = crate::loader::vmlinux_btf().ok();
    let btf_modules = fs::read_dir("/sys/kernel/btf")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n != "vmlinux")
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let mut btf_modules = btf_modules;
    btf_modules.sort();
    let tracefs = loader::tracefs().ok().map(|p| p.display().to_string());
    let (cap_eff, capabilities) = capabilities();
    let loaded = loader::load(&LoadOptions::default());
    let permitted = !matches!(loaded, Err(crate::error::Error::Permission(_)));
    let (program_kinds, ring_buffer) = match loaded {
        Ok(mut ebpf) => {
            let k = kinds(&mut ebpf, btf);
            (
                k,
                Kind {
                    kind: "ringbuf",
                    available: true,
                    result: "ok",
                    error: None,
                },
            )
        }
        Err(e) => (
            Vec::new(),
            Kind {
                kind: "ringbuf",
                available: false,
                result: "load failed",
                error: Some(describe(&e)),
            },
        ),
    };
    let probe_points = points(btf);
    let tp_ok = program_kinds.iter().any(|k| k.kind == "tracepoint" && k.available);
    let (usable, reason) = if !permitted {
        (
            false,
            format!(
                "BPF not permitted: uid {} has {} (CapEff {cap_eff}); {}",
                // SAFETY: geteuid has no preconditions.
                unsafe { libc::geteuid() },
                if capabilities.is_empty() {
                    "no capabilities".to_string()
                } else {
                    capabilities.join(" ")
                },
                crate::error::permission_hint()
            ),
        )
    } else if !ring_buffer.available {
        (
            false,
            format!(
                "cannot load the BPF object: {}",
                ring_buffer.error.clone().unwrap_or_default()
            ),
        )
    } else if !tp_ok {
        (
            false,
            "tracepoint programs do not attach here: the tracer cannot follow processes".to_string(),
        )
    } else {
        let missing: Vec<_> = program_kinds.iter().filter(|k| !k.available).map(|k| k.kind).collect();
        if missing.is_empty() {
            (true, "all program kinds load and attach".to_string())
        } else {
            (
                true,
                format!(
                    "usable; unavailable here: {} (kernel-function probes need a kernel that allows them)",
                    missing.join(", ")
                ),
            )
        }
    };
    Doctor {
        schema: "gdrtrace.doctor/v1",
        kernel: h.kernel,
        lockdown: h.lockdown,
        btf_vmlinux: btf.is_some(),
        btf_modules,
        tracefs,
        program_kinds,
        ring_buffer,
        capabilities,
        cap_eff,
        probe_points,
        probe_table: probe_table(),
        coverage: coverage_now().unwrap_or_default(),
        usable,
        permitted,
        reason,
    }
}

pub fn doctor(args: &DoctorArgs) -> Result<i32> {
    let d = collect();
    if args.format() == Format::Json {
        crate::output::print_json("the findings", &d)?;
    } else {
        out!("{}", render(&d));
    }
    if !d.permitted {
        errln!("gdrtrace: {}", d.reason);
        return Ok(crate::error::exit::NOT_PERMITTED);
    }
    if !d.usable {
        errln!("gdrtrace: {}", d.reason);
        return Ok(crate::error::exit::FAILURE);
    }
    Ok(0)
}

fn render(d: &Doctor) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(o, "kernel          {}", d.kernel);
    let _ = writeln!(o, "lockdown        {}", d.lockdown);
    let _ = writeln!(
        o,
        "BTF             vmlinux: {}; modules with BTF: {}",
        if d.btf_vmlinux { "yes" } else { "no" },
        if d.btf_modules.is_empty() {
            "none".to_string()
        } else {
            d.btf_modules.join(" ")
        }
    );
    let _ = writeln!(
        o,
        "tracefs         {}",
        d.tracefs.as_deref().unwrap_or("not mounted (mount failed)")
    );
    let _ = writeln!(o, "capabilities    {} (CapEff {})", d.capabilities.join(" "), d.cap_eff);
    let _ = writeln!(o, "\nBPF program kinds (trial load + attach)");
    for k in d.program_kinds.iter().chain(std::iter::once(&d.ring_buffer)) {
        let _ = writeln!(
            o,
            "  {:<16} {:<12} {}",
            k.kind,
            if k.available { "available" } else { "UNAVAILABLE" },
            k.error
                .as_deref()
                .map(|e| format!("{}: {e}", k.result))
                .unwrap_or_default()
        );
    }
    let _ = writeln!(o, "\nProbe points (does the target exist here?)");
    for p in &d.probe_points {
        let _ = writeln!(
            o,
            "  {:<36} {:<10} {:<4} {}",
            p.point,
            p.family,
            if p.exists { "yes" } else { "no" },
            p.found_in
        );
    }
    let _ = writeln!(o, "\nLibrary probe table (link group: how its traps are budgeted)");
    for g in Group::ALL {
        let rows: Vec<_> = d.probe_table.iter().filter(|r| r.group == g).collect();
        let _ = writeln!(o, "  {:<8} {} row(s): {}", g.name(), rows.len(), g.budget());
        for traps in [1, 2] {
            let names: Vec<&str> = rows
                .iter()
                .filter(|r| r.traps_per_call == traps)
                .map(|r| r.row)
                .collect();
            if !names.is_empty() {
                let _ = writeln!(o, "    {traps} trap(s) a call: {}", names.join(", "));
            }
        }
    }
    let _ = writeln!(o, "\nProbe availability (planner)");
    for c in &d.coverage {
        let _ = writeln!(o, "  {:<36} {:<10} {}", c.point, c.family.name(), c.summary());
    }
    let _ = writeln!(o, "\nverdict: {}", d.reason);
    o
}

/// The planner's view, for reports that embed doctor's matrix.
pub fn coverage_now() -> Option<Vec<crate::probes::Coverage>> {
    let mut ebpf = loader::load(&LoadOptions::default()).ok()?;
    let mut p = Planner::new();
    p.attach_catalog(&mut ebpf, &|_| true);
    for file in libs::installed() {
        p.attach_library(&mut ebpf, &file);
    }
    Some(p.table())
}
