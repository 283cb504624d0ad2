//! No import circle between files (issue 47): `layers.rs` keeps the
//! top-level modules in one order; this test keeps the files inside them,
//! and across their folders, in one too. It reads every `*.rs` of
//! `tracer/src` and `xtask/src`, resolves each path through `crate::`,
//! `super::`, `self::` or a child module (`use` trees included) outside
//! `#[cfg(test)]` code to the file that defines the module it names, and
//! fails on any circle of files, printing it with a line per step.
//!
//! A module declares and re-exports its submodules: its references down
//! into them (`probes/mod.rs` -> `probes/uapi.rs`, `classify/comm.rs` ->
//! `classify/comm/log.rs`) are containment, not dependencies, and are left
//! out. A submodule's references up to its parent, and every reference
//! between siblings or across folders, count.
use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use super::layers::{code_of, without_tests};

/// One file's module path from its crate root (`probes/uapi.rs` ->
/// `["probes", "uapi"]`, `probes/mod.rs` -> `["probes"]`, `lib.rs` -> `[]`).
fn module_path(root: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(root).expect("a file under the crate root");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    match last.as_str() {
        "mod.rs" | "lib.rs" | "main.rs" => {}
        other => parts.push(other.trim_end_matches(".rs").to_string()),
    }
    parts
}

fn is_root_file(file: &Path) -> bool {
    file.file_name()
        .is_some_and(|n| n == "mod.rs" || n == "lib.rs" || n == "main.rs")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths of the use tree or expression path starting at `s` (just
/// after its first `::`), as segment lists.
fn tree(s: &str) -> Vec<Vec<String>> {
    let b = s.as_bytes();
    let mut i = 0;
    tree_at(s, b, &mut i)
}

fn skip_ws(b: &[u8], i: &mut usize) {
    while *i < b.len() && (b[*i] as char).is_whitespace() {
        *i += 1;
    }
}

fn tree_at(s: &str, b: &[u8], i: &mut usize) -> Vec<Vec<String>> {
    skip_ws(b, i);
    if *i < b.len() && b[*i] == b'{' {
        *i += 1;
        let mut out = Vec::new();
        loop {
            skip_ws(b, i);
            if *i >= b.len() {
                return out;
            }
            if b[*i] == b'}' {
                *i += 1;
                return out;
            }
            if b[*i] == b',' {
                *i += 1;
                continue;
            }
            let before = *i;
            out.extend(tree_at(s, b, i));
            // `as alias` and anything else up to the next `,` or `}`.
            let mut depth = 0;
            while *i < b.len() {
                match b[*i] {
                    b'{' => depth += 1,
                    b'}' if depth == 0 => break,
                    b'}' => depth -= 1,
                    b',' if depth == 0 => break,
                    _ => {}
                }
                *i += 1;
            }
            if *i == before {
                *i += 1;
            }
        }
    }
    let start = *i;
    while *i < b.len() && is_ident(b[*i] as char) {
        *i += 1;
    }
    if *i == start {
        // `*` or something that is no path: the prefix itself.
        return vec![Vec::new()];
    }
    let name = s[start..*i].to_string();
    let mut j = *i;
    skip_ws(b, &mut j);
    if s[j..].starts_with("::") {
        *i = j + 2;
        let rest = tree_at(s, b, i);
        return rest
            .into_iter()
            .map(|mut p| {
                p.insert(0, name.clone());
                p
            })
            .collect();
    }
    if name == "self" {
        return vec![Vec::new()];
    }
    vec![vec![name]]
}

/// The module paths `code` (of the file at module path `me`, declaring the
/// child modules `children`) refers to, with their lines.
fn references(code: &str, me: &[String], children: &BTreeSet<String>) -> Vec<(Vec<String>, usize)> {
    let mut out = Vec::new();
    let line_of = |pos: usize| code[..pos].matches('\n').count() + 1;
    let b = code.as_bytes();
    let mut pos = 0;
    while pos < b.len() {
        let c = b[pos] as char;
        let prev = if pos == 0 { ' ' } else { b[pos - 1] as char };
        if !is_ident(c) || is_ident(prev) || prev == '$' || prev == ':' {
            pos += 1;
            continue;
        }
        let end = code[pos..].find(|c: char| !is_ident(c)).map_or(code.len(), |e| pos + e);
        let word = &code[pos..end];
        if !code[end..].starts_with("::") {
            pos = end;
            continue;
        }
        // The path's base: where it starts from.
        let mut base: Vec<String> = match word {
            "crate" => Vec::new(),
            "self" => me.to_vec(),
            "super" => me[..me.len().saturating_sub(1)].to_vec(),
            w if children.contains(w) => {
                let mut p = me.to_vec();
                p.push(w.to_string());
                p
            }
            _ => {
                pos = end;
                continue;
            }
        };
        // `super::super::...`
        let mut rest = &code[end + 2..];
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        for p in tree(rest) {
            let mut full = base.clone();
            full.extend(p.into_iter().filter(|s| s != "self"));
            out.push((full, line_of(pos)));
        }
        pos = end;
    }
    out
}

/// The file that defines the deepest module of `path` that has one.
fn file_of(modules: &BTreeMap<Vec<String>, PathBuf>, path: &[String]) -> Option<PathBuf> {
    (0..=path.len()).rev().find_map(|n| modules.get(&path[..n]).cloned())
}

/// Edges between the files of one crate: (from, to) -> first line.
fn crate_edges(root: &Path) -> BTreeMap<(PathBuf, PathBuf), usize> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    files.sort();
    let mut modules = BTreeMap::new();
    let mut texts = BTreeMap::new();
    let mut test_only: BTreeSet<PathBuf> = BTreeSet::new();
    for f in &files {
        let rel = f.strip_prefix(root).expect("under root").to_path_buf();
        modules.insert(module_path(root, f), rel.clone());
        let (code, tests) = without_tests(&code_of(&std::fs::read_to_string(f).expect("a readable source file")));
        let dir = if is_root_file(f) {
            rel.parent().expect("a parent").to_path_buf()
        } else {
            rel.with_extension("")
        };
        for t in tests {
            test_only.insert(dir.join(format!("{t}.rs")));
            test_only.insert(dir.join(&t));
        }
        texts.insert(rel, code);
    }
    let mut edges = BTreeMap::new();
    for (rel, code) in &texts {
        if test_only.iter().any(|t| rel == t || rel.starts_with(t)) {
            continue;
        }
        let me = module_path(root, &root.join(rel));
        let children: BTreeSet<String> = code
            .lines()
            .filter_map(|l| {
                let l = l.trim().trim_start_matches("pub ").trim_start_matches("pub(crate) ");
                let name = l.strip_prefix("mod ")?.strip_suffix(';')?;
                Some(name.trim().to_string())
            })
            .collect();
        for (path, line) in references(code, &me, &children) {
            let Some(to) = file_of(&modules, &path) else {
                continue;
            };
            if &to == rel {
                continue;
            }
            // A module's references into its own submodules: containment.
            let to_me = module_path(root, &root.join(&to));
            if to_me.len() > me.len() && to_me.starts_with(&me) {
                continue;
            }
            if test_only.iter().any(|t| &to == t || to.starts_with(t)) {
                continue;
            }
            edges.entry((rel.clone(), to)).or_insert(line);
        }
    }
    edges
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("a readable source folder").flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The circles of a graph: one shortest circle through each strongly
/// connected component of more than one file, as `a:LINE -> b:LINE -> a`.
fn circles(edges: &BTreeMap<(PathBuf, PathBuf), usize>) -> Vec<String> {
    let mut next: BTreeMap<&PathBuf, Vec<&PathBuf>> = BTreeMap::new();
    for (a, b) in edges.keys() {
        next.entry(a).or_default().push(b);
    }
    let nodes: BTreeSet<&PathBuf> = edges.keys().flat_map(|(a, b)| [a, b]).collect();
    let reach = |from: &PathBuf| -> BTreeMap<PathBuf, PathBuf> {
        // Breadth first: each reached file with the one it was reached from.
        let mut seen: BTreeMap<PathBuf, PathBuf> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([from.clone()]);
        while let Some(n) = queue.pop_front() {
            for m in next.get(&n).into_iter().flatten() {
                if !seen.contains_key(*m) {
                    seen.insert((*m).clone(), n.clone());
                    queue.push_back((*m).clone());
                }
            }
        }
        seen
    };
    let mut done: BTreeSet<PathBuf> = BTreeSet::new();
    let mut out = Vec::new();
    for n in nodes {
        if done.contains(n) {
            continue;
        }
        let seen = reach(n);
        if !seen.contains_key(n) {
            continue;
        }
        // The shortest way back to n.
        let mut path = vec![n.clone()];
        let mut at = seen[n].clone();
        while &at != n {
            path.push(at.clone());
            at = seen[&at].clone();
        }
        path.push(n.clone());
        path.reverse();
        let steps: Vec<String> = path
            .windows(2)
            .map(|w| format!("{}:{}", w[0].display(), edges[&(w[0].clone(), w[1].clone())]))
            .collect();
        // The whole component: every file that reaches n and is reached from it.
        let component: Vec<String> = seen
            .keys()
            .filter(|m| reach(m).contains_key(n))
            .map(|m| m.display().to_string())
            .collect();
        done.extend(component.iter().map(PathBuf::from));
        let mut line = format!("{} -> {}", steps.join(" -> "), n.display());
        if component.len() > steps.len() {
            line += &format!(" (one circle of {} files: {})", component.len(), component.join(", "));
        }
        out.push(line);
    }
    out
}

fn check(crate_dir: &str) -> (usize, Vec<String>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(crate_dir);
    let edges = crate_edges(&root);
    (edges.len(), circles(&edges))
}

#[test]
fn no_import_circle_in_the_tracer() {
    let (edges, found) = check("src");
    assert!(edges > 200, "too few edges found ({edges}): is the scanner broken?");
    assert!(found.is_empty(), "import circles in tracer/src:\n{}", found.join("\n"));
}

#[test]
fn no_import_circle_in_xtask() {
    let (edges, found) = check("../xtask/src");
    assert!(edges > 5, "too few edges found ({edges}): is the scanner broken?");
    assert!(found.is_empty(), "import circles in xtask/src:\n{}", found.join("\n"));
}

#[test]
fn a_circle_is_found_and_printed() {
    let me = vec!["probes".to_string(), "uapi".to_string()];
    let children = BTreeSet::from(["rows".to_string()]);
    let code = "use super::{catalog::Family, uprobes::{self, Group}};\nuse crate::units::*;\nfn f() { rows::x(); crate::probes::planner::program(); }\n";
    let refs: Vec<(Vec<String>, usize)> = references(code, &me, &children);
    let names: Vec<String> = refs.iter().map(|(p, l)| format!("{}@{l}", p.join("::"))).collect();
    assert_eq!(
        names,
        [
            "probes::catalog::Family@1",
            "probes::uprobes@1",
            "probes::uprobes::Group@1",
            "units@2",
            "probes::uapi::rows::x@3",
            "probes::planner::program@3",
        ]
    );
    let edge = |a: &str, b: &str, l| ((PathBuf::from(a), PathBuf::from(b)), l);
    let edges = BTreeMap::from([
        edge("a.rs", "b.rs", 3),
        edge("b.rs", "c.rs", 5),
        edge("c.rs", "a.rs", 7),
        edge("c.rs", "d.rs", 9),
    ]);
    assert_eq!(circles(&edges), ["a.rs:3 -> b.rs:5 -> c.rs:7 -> a.rs"]);
    let acyclic = BTreeMap::from([edge("a.rs", "b.rs", 3), edge("b.rs", "c.rs", 5)]);
    assert!(circles(&acyclic).is_empty());
}
