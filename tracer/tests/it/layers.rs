//! The import layers of `tracer/src` (docs/ARCHITECTURE.md): data flows one
//! way, and a module imports only modules on its left in `STAGES`. This
//! test reads every `tracer/src/**/*.rs`, collects its `crate::<module>`
//! references outside `#[cfg(test)]` modules (tests may reach up: they
//! build whole pipelines), and fails on any reference from a stage to a
//! later one, naming the file and line (`EXCEPTIONS` is empty).
use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

/// Every top-level module of `tracer/src`, in stage order: a module may
/// import the modules before it, never one after it.
const STAGES: &[&str] = &[
    // Ground floor: printing, errors, units, progress lines, names, input
    // files, host facts.
    "version",
    "error",
    "output",
    "intern",
    "units",
    "progress",
    // Flags moved to the nearest value the tool supports, said on stderr.
    "clamp",
    "input",
    "signals",
    "spawn",
    "topo",
    "host",
    // Where a communicator's identity comes from besides its init call:
    // NCCL's RAS service, TCP connections (/proc).
    "identity",
    // The loader, the probe table and the ring buffer.
    "loader",
    "probes",
    "events",
    // Sampling of the busy rows: the controller (when their probes are on)
    // and the estimator (their calls while off), docs/sampling.md.
    "sampling",
    // The pipeline: registry, counters, per-call verdicts, aggregation,
    // judging, the report, and explaining the report (its rules read the
    // typed report).
    "model",
    "counters",
    "classify",
    "stats",
    "judge",
    "report",
    "explain",
    // Beside the pipeline: recordings of the aggregator's inputs and the
    // report's inputs (written by an observer of `stats`, read by replay).
    "recording",
    // Readers of reports, the tracing session and loop, workloads, the
    // agent, the live view, the command line.
    "compare",
    "job",
    "session",
    "calibrate",
    "trace",
    "drive",
    "serve",
    // The live view: frames from judged reports (`top/feed.rs`), drawn
    // with ratatui; `cmd/top.rs` feeds it from `trace` or a recording.
    "top",
    "cli",
    "cmd",
    // Test support (compiled only with `cfg(test)`).
    "fixtures",
    // The binary.
    "main",
];

/// Imports allowed to run back up, each with why (docs/ARCHITECTURE.md):
/// none. The recording, which writes and reads the aggregator's input and
/// the report's inputs, is a stage of its own after `report`.
const EXCEPTIONS: &[(&str, &str)] = &[];

/// One reference: (from module, to module, file, line).
type Reference = (String, String, PathBuf, usize);

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("tracer/src is readable").flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file belongs to (`classify/ucx.rs` -> `classify`).
fn module_of(root: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(root).expect("a file under src");
    let first = rel
        .components()
        .next()
        .expect("a relative path")
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// The text with comments blanked (line structure kept) and string
/// literals emptied, so that only code is scanned.
pub(super) fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < b.len() {
        if b[i] == '/' && b.get(i + 1) == Some(&'/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if b[i] == '/' && b.get(i + 1) == Some(&'*') {
            i += 2;
            while i < b.len() && !(b[i] == '*' && b.get(i + 1) == Some(&'/')) {
                if b[i] == '\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += 2;
        } else if b[i] == '"' {
            out.push('"');
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                if b.get(i) == Some(&'\n') {
                    out.push('\n');
                }
                i += 1;
            }
            out.push('"');
            i += 1;
        } else if b[i] == '\'' && b.get(i + 2) == Some(&'\'') {
            // A char literal such as '{' (lifetimes have no closing quote).
            out.push_str("' '");
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// Code outside `#[cfg(test)]` items (inline modules and functions are
/// blanked to their closing brace), and the names of `#[cfg(test)] mod x;`
/// files the text declares.
pub(super) fn without_tests(code: &str) -> (String, Vec<String>) {
    let mut out = String::with_capacity(code.len());
    let mut test_files = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let semi = after.find(';').unwrap_or(after.len());
        let brace = after.find('{').unwrap_or(after.len());
        if semi < brace {
            // `#[cfg(test)] mod name;` (or a `use`): skip the item.
            let item = &after[..semi];
            if let Some(name) = item.split_whitespace().skip_while(|w| *w != "mod").nth(1) {
                test_files.push(name.to_string());
            }
            out.extend(item.chars().filter(|c| *c == '\n'));
            rest = &after[semi..];
            continue;
        }
        let mut depth = 0usize;
        let mut end = after.len();
        for (i, c) in after.char_indices().skip(brace) {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.extend(after[..end].chars().filter(|c| *c == '\n'));
        rest = &after[end..];
    }
    out.push_str(rest);
    (out, test_files)
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The top-level modules `code` names through `crate::`, with their line
/// numbers (`crate::a::b`, and `crate::{a::b, c}` groups).
fn references(code: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let line_of = |pos: usize| code[..pos].matches('\n').count() + 1;
    let mut from = 0;
    while let Some(at) = code[from..].find("crate::") {
        let pos = from + at + "crate::".len();
        from = pos;
        // `$crate::` in macros and `foo_crate::` are not this crate.
        let before = code[..pos - "crate::".len()].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let rest = &code[pos..];
        if let Some(group) = rest.strip_prefix('{') {
            // Names at depth 1 of the group.
            let mut depth = 1usize;
            let mut expect_name = true;
            let mut i = 0;
            let chars: Vec<(usize, char)> = group.char_indices().collect();
            while i < chars.len() && depth > 0 {
                let (off, c) = chars[i];
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 1 => expect_name = true,
                    c if c.is_whitespace() => {}
                    _ if expect_name && depth == 1 => {
                        let name = ident_at(&group[off..]);
                        if !name.is_empty() && name != "self" {
                            out.push((name.to_string(), line_of(pos + 1 + off)));
                        }
                        expect_name = false;
                    }
                    _ => {}
                }
                i += 1;
            }
        } else {
            let name = ident_at(rest);
            if !name.is_empty() {
                out.push((name.to_string(), line_of(pos)));
            }
        }
    }
    out
}

/// Every `crate::` reference of the crate outside tests.
fn crate_references() -> Vec<Reference> {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    // Files declared `#[cfg(test)] mod x;` are test code as a whole.
    let mut test_only: BTreeSet<PathBuf> = BTreeSet::new();
    let mut texts = BTreeMap::new();
    for f in &files {
        let (code, tests) = without_tests(&code_of(&std::fs::read_to_string(f).expect("a readable source file")));
        let dir = if f
            .file_name()
            .is_some_and(|n| n == "mod.rs" || n == "lib.rs" || n == "main.rs")
        {
            f.parent().expect("a parent directory").to_path_buf()
        } else {
            f.with_extension("")
        };
        for t in tests {
            test_only.insert(dir.join(format!("{t}.rs")));
            test_only.insert(dir.join(&t).join("mod.rs"));
        }
        texts.insert(f.clone(), code);
    }
    let mut out = Vec::new();
    for (f, code) in &texts {
        if test_only.iter().any(|t| f.starts_with(t.with_extension("")) || f == t) {
            continue;
        }
        let from = module_of(&root, f);
        if from == "lib" {
            continue;
        }
        for (to, line) in references(code) {
            if to != from {
                out.push((
                    from.clone(),
                    to,
                    f.strip_prefix(&root).expect("a file under src").to_path_buf(),
                    line,
                ));
            }
        }
    }
    out
}

/// References from a stage to a later one (or to a module `STAGES` lacks),
/// allowed ones aside.
fn violations(refs: &[Reference], stages: &[&str], allowed: &[(&str, &str)]) -> Vec<String> {
    let rank = |m: &str| stages.iter().position(|s| *s == m);
    let mut out = Vec::new();
    for (from, to, file, line) in refs {
        let (Some(a), Some(b)) = (rank(from), rank(to)) else {
            out.push(format!(
                "{}:{line}: {from} -> {to}: module not in STAGES",
                file.display()
            ));
            continue;
        };
        if b > a && !allowed.contains(&(from.as_str(), to.as_str())) {
            out.push(format!(
                "{}:{line}: {from} -> {to} runs back up ({to} is a later stage than {from})",
                file.display()
            ));
        }
    }
    out
}

#[test]
fn every_module_is_in_a_stage() {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let modules: BTreeSet<String> = files
        .iter()
        .map(|f| module_of(&root, f))
        .filter(|m| m != "lib")
        .collect();
    let missing: Vec<_> = modules.iter().filter(|m| !STAGES.contains(&m.as_str())).collect();
    assert!(missing.is_empty(), "top-level modules missing from STAGES: {missing:?}");
    let gone: Vec<_> = STAGES.iter().filter(|s| !modules.contains(**s)).collect();
    assert!(gone.is_empty(), "STAGES names modules that do not exist: {gone:?}");
}

#[test]
fn imports_run_one_way() {
    let refs = crate_references();
    assert!(
        refs.len() > 100,
        "too few references found ({}): is the scanner broken?",
        refs.len()
    );
    let allowed: Vec<(&str, &str)> = EXCEPTIONS.to_vec();
    let bad = violations(&refs, STAGES, &allowed);
    assert!(bad.is_empty(), "imports running back up:\n{}", bad.join("\n"));
    assert!(EXCEPTIONS.len() <= 1, "at most one import may run back up");
    // Every allowed edge still exists (a stale one hides nothing, but says
    // the architecture page is out of date).
    for (from, to) in &allowed {
        assert!(
            refs.iter().any(|(f, t, _, _)| f == from && t == to),
            "{from} -> {to} is allowed but no longer imported: drop it"
        );
    }
}

#[test]
fn a_cycle_is_caught() {
    let code = "use crate::{\n    report::Report,\n    model::Registry,\n};\nfn f() { crate::stats::Aggregator::default(); }\n";
    let names: Vec<String> = references(code).into_iter().map(|(m, _)| m).collect();
    assert_eq!(names, ["report", "model", "stats"]);
    let refs: Vec<Reference> = vec![
        ("model".into(), "stats".into(), "model/mod.rs".into(), 3),
        ("stats".into(), "model".into(), "stats/mod.rs".into(), 9),
    ];
    let bad = violations(&refs, &["model", "stats"], &[]);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].starts_with("model/mod.rs:3: model -> stats runs back up"),
        "{bad:?}"
    );
    // Tests are not scanned; comments and strings are not code.
    let (code, files) = without_tests(&code_of(
        "// crate::cmd\nlet s = \"crate::cmd\";\n#[cfg(test)]\nmod tests {\n    use crate::cmd;\n}\n#[cfg(test)]\nmod more;\n",
    ));
    assert!(references(&code).is_empty(), "{code}");
    assert_eq!(files, ["more"]);
}
