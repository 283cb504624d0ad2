//! A kernel probe is declared in three places that must agree: its op
//! constant in `tracer-common`, its line in `tracer-ebpf/src/kfuncs.rs`
//! (which makes its four programs) and its catalog row
//! (`tracer/src/probes/catalog.rs`). This test checks them against each
//! other and against the eBPF object embedded in the binary, without
//! loading anything (no root needed):
//! - every program a catalog row can attach exists in the object, with the
//!   program type its strategy loads it as (fentry, fexit, kprobe,
//!   kretprobe, tracepoint, tp_btf, raw tracepoint, uprobe);
//! - every fentry program in the object belongs to a catalog row;
//! - `kfuncs.rs` and the catalog pair each kernel function with the same
//!   `op::` constant, and name the same functions.
//!
//! `checker_finds_a_wrong_table` runs the same checks on deliberately wrong
//! tables, so a disagreement cannot pass unnoticed.
use std::collections::{BTreeMap, BTreeSet, HashMap};

use aya_obj::ProgramSection;
use gdrtrace::probes::{CATALOG, ProbePoint, Strategy, Target};

/// Program type, as the planner loads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Type {
    FEntry,
    FExit,
    KProbe,
    KRetProbe,
    TracePoint,
    BtfTracePoint,
    RawTracePoint,
    UProbe,
    URetProbe,
    Other,
}

fn type_of(s: &ProgramSection) -> Type {
    match s {
        ProgramSection::FEntry { .. } => Type::FEntry,
        ProgramSection::FExit { .. } => Type::FExit,
        ProgramSection::KProbe => Type::KProbe,
        ProgramSection::KRetProbe => Type::KRetProbe,
        ProgramSection::TracePoint => Type::TracePoint,
        ProgramSection::BtfTracePoint => Type::BtfTracePoint,
        ProgramSection::RawTracePoint => Type::RawTracePoint,
        ProgramSection::UProbe { .. } => Type::UProbe,
        ProgramSection::URetProbe { .. } => Type::URetProbe,
        _ => Type::Other,
    }
}

/// The programs the embedded object holds, by name.
fn object_programs() -> HashMap<String, Type> {
    let obj = aya_obj::Object::parse(gdrtrace::loader::BPF_ELF).expect("the embedded eBPF object parses");
    obj.programs
        .iter()
        .map(|(n, p)| (n.clone(), type_of(&p.section)))
        .collect()
}

/// The programs a row's strategies load, with their types (the names the
/// planner and the uprobe attacher use).
fn programs_of(p: &ProbePoint) -> Vec<(String, Type)> {
    let mut out = Vec::new();
    for s in p.strategies {
        match (s, p.target.kernel_fn()) {
            (Strategy::Fentry, Some(f)) => {
                out.push((format!("fentry_{f}"), Type::FEntry));
                out.push((format!("fexit_{f}"), Type::FExit));
            }
            (Strategy::Kprobe, Some(f)) => {
                out.push((format!("kprobe_{f}"), Type::KProbe));
                out.push((format!("kretprobe_{f}"), Type::KRetProbe));
            }
            (Strategy::Tracepoint, _) => out.extend(p.programs.iter().map(|n| (n.to_string(), Type::TracePoint))),
            (Strategy::BtfSyscall, _) => {
                out.push(("btf_sys_enter".into(), Type::BtfTracePoint));
                out.push(("btf_sys_exit".into(), Type::BtfTracePoint));
            }
            (Strategy::RawSyscall, _) => {
                out.push(("raw_sys_enter".into(), Type::RawTracePoint));
                out.push(("raw_sys_exit".into(), Type::RawTracePoint));
            }
            (Strategy::Uprobe, _) => {
                out.push(("uapi_entry".into(), Type::UProbe));
                out.push(("uapi_return".into(), Type::URetProbe));
            }
            (Strategy::UprobeMulti, _) => {
                out.push(("uapi_entry_multi".into(), Type::UProbe));
                out.push(("uapi_return_multi".into(), Type::URetProbe));
            }
            _ => {}
        }
    }
    out
}

/// `name => op::CONST` pairs inside the invocations of `mac!` in `src`
/// (the declarations of kernel functions in kfuncs.rs and the catalog).
fn declared_pairs(src: &str, mac: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for block in src.split(&format!("{mac}!")).skip(1) {
        let body = &block[..block.find(['}', ')']).unwrap_or(block.len())];
        for item in body.split([';', ',', '\n']) {
            if let Some((name, konst)) = item.split_once("=>") {
                let konst = konst.trim().trim_start_matches("op::");
                out.insert(name.trim().to_string(), konst.to_string());
            }
        }
    }
    out
}

/// Every disagreement between the catalog rows, the object's programs and
/// the two declarations of the kernel functions.
fn disagreements(
    rows: &[ProbePoint],
    programs: &HashMap<String, Type>,
    kfuncs: &BTreeMap<String, String>,
    catalog: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut out = Vec::new();
    for p in rows {
        for (name, want) in programs_of(p) {
            match programs.get(&name) {
                None => out.push(format!("{}: program {name} is not in the eBPF object", p.name)),
                Some(t) if *t != want => out.push(format!("{}: program {name} is {t:?}, not {want:?}", p.name)),
                Some(_) => {}
            }
        }
    }
    let kernel: BTreeSet<&str> = rows.iter().filter_map(|p| p.target.kernel_fn()).collect();
    for name in programs.keys() {
        if let Some(f) = name.strip_prefix("fentry_")
            && !kernel.contains(f)
        {
            out.push(format!("program {name} has no catalog row"));
        }
    }
    for f in &kernel {
        match (kfuncs.get(*f), catalog.get(*f)) {
            (Some(a), Some(b)) if a != b => out.push(format!("{f}: kfuncs.rs says op::{a}, the catalog op::{b}")),
            (None, _) => out.push(format!("{f}: not in kfuncs.rs")),
            (_, None) => out.push(format!("{f}: not declared by the catalog's kernel_rows!")),
            _ => {}
        }
    }
    for f in kfuncs.keys() {
        if !kernel.contains(f.as_str()) {
            out.push(format!("{f}: in kfuncs.rs, not in the catalog"));
        }
    }
    out
}

const KFUNCS: &str = include_str!("../../../tracer-ebpf/src/kfuncs.rs");
const CATALOG_SRC: &str = include_str!("../../src/probes/catalog.rs");

#[test]
fn every_catalog_program_is_in_the_object_and_kernel_ops_agree() {
    let kfuncs = declared_pairs(KFUNCS, "kernel_functions");
    let catalog = declared_pairs(CATALOG_SRC, "kernel_rows");
    assert!(kfuncs.len() >= 30, "kfuncs.rs declarations read: {kfuncs:?}");
    assert_eq!(kfuncs.len(), catalog.len());
    let problems = disagreements(&CATALOG, &object_programs(), &kfuncs, &catalog);
    assert!(
        problems.is_empty(),
        "the probe declarations disagree:\n{}",
        problems.join("\n")
    );
}

#[test]
fn checker_finds_a_wrong_table() {
    let programs = object_programs();
    let kfuncs = declared_pairs(KFUNCS, "kernel_functions");
    let catalog = declared_pairs(CATALOG_SRC, "kernel_rows");
    // A row whose function has no programs, and a tracepoint row whose
    // program is a kprobe.
    let base = CATALOG
        .iter()
        .find(|p| matches!(p.target, Target::KernelFn(_)))
        .expect("a kernel row");
    let mut rows: Vec<ProbePoint> = CATALOG.to_vec();
    rows.push(ProbePoint {
        name: "no_such_function",
        target: Target::KernelFn("no_such_function"),
        ..*base
    });
    let tp = CATALOG
        .iter()
        .position(|p| p.strategies == [Strategy::Tracepoint])
        .expect("a tracepoint row");
    rows[tp].programs = &["kprobe_pin_user_pages"];
    // kfuncs.rs giving one function another row's op.
    let mut wrong = kfuncs.clone();
    wrong.insert("pin_user_pages".into(), "UNPIN_USER_PAGES".into());
    let problems = disagreements(&rows, &programs, &wrong, &catalog);
    let has = |s: &str| problems.iter().any(|p| p.contains(s));
    assert!(
        has("program fentry_no_such_function is not in the eBPF object"),
        "{problems:?}"
    );
    assert!(
        has("program kprobe_pin_user_pages is KProbe, not TracePoint"),
        "{problems:?}"
    );
    assert!(
        has("pin_user_pages: kfuncs.rs says op::UNPIN_USER_PAGES"),
        "{problems:?}"
    );
    assert!(has("no_such_function: not in kfuncs.rs"), "{problems:?}");
    // A catalog without one kernel row leaves its programs orphaned.
    let fewer: Vec<ProbePoint> = CATALOG
        .iter()
        .filter(|p| !matches!(p.target, Target::KernelFn("ib_umem_get")))
        .copied()
        .collect();
    let problems = disagreements(&fewer, &programs, &kfuncs, &catalog);
    assert!(
        problems
            .iter()
            .any(|p| p == "program fentry_ib_umem_get has no catalog row"),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p == "ib_umem_get: in kfuncs.rs, not in the catalog"),
        "{problems:?}"
    );
}
