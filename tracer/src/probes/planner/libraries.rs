//! The planner's library side: the uprobe table's rows attached per
//! library file (every exported variant of a row's symbol), the coverage
//! rows of each library and of each process's copies of it.
use super::*;

/// Why a library row has no probes: no traced process maps the library, and
/// it is not installed, is installed (its paths in the row's detail), or
/// was not looked for.
pub const NOT_INSTALLED: &str = "not installed on this host, and not mapped by a traced process";
pub const INSTALLED_NOT_MAPPED: &str = "installed on this host, not mapped by a traced process";
pub const NOT_MAPPED: &str = "not mapped by a traced process";

impl Planner {
    /// The probe points of every table row of `lib` in a file: each
    /// exported variant of the row's symbol (every ELF version, CUDA
    /// suffixes), one per file offset.
    pub fn points(lib: Lib, syms: &[Symbol]) -> (Vec<Point>, Vec<&'static str>) {
        let mut points = Vec::new();
        let mut missing = Vec::new();
        let mut offsets = HashSet::new();
        for (i, row) in uapi::TABLE.iter().enumerate().filter(|(_, r)| r.lib == lib) {
            let before = points.len();
            for sym in syms.iter().filter(|s| uapi::is_variant(&s.name, row.symbol)) {
                if !offsets.insert(sym.file_offset) {
                    continue;
                }
                points.push(Point {
                    offset: sym.file_offset,
                    op: uapi::op_of(i),
                    symbol: sym.display(),
                    needs_return: !row.entry_only(),
                    group: row.group(),
                });
            }
            if points.len() == before {
                missing.push(row.symbol);
            }
        }
        (points, missing)
    }

    /// Attaches table row `op`'s probes to every exported variant of `base`
    /// in `path` (tests aim rows at stand-in functions this way). Returns
    /// the symbols attached.
    pub fn attach_symbol(
        &mut self,
        ebpf: &mut Ebpf,
        path: &Path,
        syms: &[Symbol],
        base: &str,
        op: u32,
    ) -> Result<Vec<String>, String> {
        self.configure_table(ebpf)?;
        let row = uapi::row_of(op).ok_or_else(|| format!("op {op} is not a table row"))?.1;
        let mut offsets = HashSet::new();
        let points: Vec<Point> = syms
            .iter()
            .filter(|s| uapi::is_variant(&s.name, base) && offsets.insert(s.file_offset))
            .map(|s| Point {
                offset: s.file_offset,
                op,
                symbol: s.display(),
                needs_return: !row.entry_only(),
                group: row.group(),
            })
            .collect();
        if points.is_empty() {
            return Ok(Vec::new());
        }
        let (attached, errors) = self.uprobes.attach(ebpf, path, &points);
        match errors.is_empty() {
            true => Ok(attached),
            false => Err(errors.join("; ")),
        }
    }

    /// Attaches every table row of a library file once per (device, inode):
    /// one link per (program, group). Returns false when the file was
    /// already attached.
    pub fn attach_library(&mut self, ebpf: &mut Ebpf, file: &LibFile) -> bool {
        if self.libs.contains_key(&file.id) {
            return false;
        }
        let mut att = LibAttachment {
            lib: file.lib,
            path: file.path.clone(),
            symbols: Vec::new(),
            missing: Vec::new(),
            dropped: Vec::new(),
            errors: Vec::new(),
            stepped: Vec::new(),
        };
        let attached = self
            .configure_table(ebpf)
            .and_then(|()| symbols::functions(&file.host_path).map_err(|e| e.to_string()));
        match attached {
            Err(e) => att.errors.push(e),
            Ok(syms) => {
                let (mut points, missing) = Self::points(file.lib, &syms);
                att.missing = missing;
                // Set-up rows are not attached again once their budget is spent.
                if self.setup_dropped.is_some() {
                    att.dropped = dropped_rows(&points);
                    points.retain(|p| p.group != uprobes::Group::Setup);
                }
                let stepped: HashSet<u64> = syms.iter().filter(|s| s.stepped).map(|s| s.file_offset).collect();
                att.stepped = points
                    .iter()
                    .filter(|p| stepped.contains(&p.offset))
                    .filter_map(|p| uapi::row_of(p.op).map(|(_, r)| r.name))
                    .collect();
                att.stepped.sort_unstable();
                att.stepped.dedup();
                let (symbols, errors) = self.uprobes.attach(ebpf, &file.host_path, &points);
                att.symbols = symbols;
                att.errors = errors;
            }
        }
        self.libs.insert(file.id, att);
        true
    }

    /// Closes the set-up links (their rows' hit rate went over budget) and
    /// records why; returns the links for the caller to drop.
    pub fn drop_setup(&mut self, ebpf: &mut Ebpf, why: String) -> Vec<aya::programs::uprobe::UProbeLink> {
        let (links, _) = self.uprobes.take(ebpf, Some(uprobes::Group::Setup));
        for att in self.libs.values_mut() {
            att.dropped = group_rows(att, uprobes::Group::Setup);
        }
        self.setup_dropped = Some(why);
        links
    }

    /// The rows (op names) with a point whose first instruction is
    /// single-stepped in a library file `pid` maps: per process, as an
    /// installed copy of a library (attached whoever maps it) need not be
    /// the one a job calls (on the GPU machine the system libnccl's
    /// ncclAllReduce is single-stepped, torch's own is not).
    pub fn stepped_rows_of(&self, pid: u32) -> Vec<&'static str> {
        let set: std::collections::BTreeSet<&'static str> = self
            .proc_libs
            .get(&pid)
            .into_iter()
            .flatten()
            .filter_map(|id| self.libs.get(id))
            .flat_map(|a| a.stepped.iter().copied())
            .collect();
        set.into_iter().collect()
    }

    /// Coverage rows of the library points, from the files attached so far.
    pub fn library_rows(&self) -> Vec<Coverage> {
        let mut by_lib: HashMap<Lib, Vec<&LibAttachment>> = HashMap::new();
        for a in self.libs.values() {
            by_lib.entry(a.lib).or_default().push(a);
        }
        CATALOG
            .iter()
            .filter_map(|p| match p.target {
                Target::Library(lib) => Some((p, lib)),
                _ => None,
            })
            .map(|(p, lib)| {
                let files = by_lib.get(&lib).cloned().unwrap_or_default();
                let attached: usize = files.iter().map(|a| a.symbols.len()).sum();
                let mut detail = Vec::new();
                for a in &files {
                    detail.push(format!("{}: {} symbols attached", a.path, a.symbols.len()));
                    if !a.missing.is_empty() {
                        detail.push(format!("{}: not exported: {}", a.path, a.missing.join(", ")));
                    }
                    if !a.dropped.is_empty() {
                        detail.push(format!(
                            "{}: closed over budget ({}): {}",
                            a.path,
                            self.setup_dropped.as_deref().unwrap_or("hot path of a running job"),
                            a.dropped.join(", ")
                        ));
                    }
                    if !a.stepped.is_empty() {
                        detail.push(format!(
                            "{}: first instruction single-stepped, not emulated (a second trap on every hit; `bench trap-cost` measures it): {}",
                            a.path,
                            a.stepped.join(", ")
                        ));
                    }
                    if let Some(note) = &self.sampling_note {
                        let rows = group_rows(a, uprobes::Group::Sampled);
                        if !rows.is_empty() {
                            detail.push(format!("{}: duty-cycled ({note}): {}", a.path, rows.join(", ")));
                        }
                        let (joined, exact): (Vec<&str>, Vec<&str>) = group_rows(a, uprobes::Group::Exact)
                            .into_iter()
                            .partition(|r| self.exact_joined.contains_key(r));
                        if !exact.is_empty() {
                            detail.push(format!(
                                "{}: counted exactly through the off phases (under a tenth of the budget a second): {}",
                                a.path,
                                exact.join(", ")
                            ));
                        }
                        for r in joined {
                            detail.push(format!("{}: duty-cycled from {}: {r}", a.path, self.exact_joined[r]));
                        }
                    }
                    for e in &a.errors {
                        detail.push(format!("{}: {e}", a.path));
                    }
                }
                let result = if attached > 0 {
                    Ok(self.uprobes.mode().map_or(Strategy::Uprobe, uprobes::Mode::strategy))
                } else if files.is_empty() {
                    let (reason, paths) = self.not_mapped(lib);
                    detail.extend(paths.into_iter().map(|p| format!("installed: {p}")));
                    Err(reason.into())
                } else {
                    Err(format!("no symbol of the table could be attached in {}", lib.name()))
                };
                // Per-point links are a fallback: say why multi links were not used.
                let tried = match self.uprobes.mode() {
                    Some(uprobes::Mode::PerPoint { why }) if result.is_ok() => vec![Attempt {
                        strategy: Strategy::UprobeMulti.name(),
                        error: why.clone(),
                    }],
                    _ => Vec::new(),
                };
                let mut c = row(p, result, tried);
                c.detail = detail;
                c
            })
            .collect()
    }

    /// Why a library no traced process maps has no probes, and where it is
    /// installed (the files `doctor` lists), when that was looked for.
    fn not_mapped(&self, lib: Lib) -> (&'static str, Vec<String>) {
        let Some(installed) = &self.installed else {
            return (NOT_MAPPED, Vec::new());
        };
        let paths: Vec<String> = installed
            .iter()
            .filter(|(l, _)| *l == lib)
            .map(|(_, p)| p.clone())
            .collect();
        if paths.is_empty() {
            (NOT_INSTALLED, paths)
        } else {
            (INSTALLED_NOT_MAPPED, paths)
        }
    }

    /// Per library of the table, what this process has: the file it maps
    /// and how much of the table attached there, or why nothing did.
    pub fn process_libraries(&self, pid: u32) -> Vec<ProcessLibrary> {
        let ids = self.proc_libs.get(&pid).cloned().unwrap_or_default();
        let modules: Vec<String> = self
            .proc_modules
            .get(&pid)
            .map(|m| m.iter().cloned().collect())
            .unwrap_or_default();
        Lib::ALL
            .iter()
            .map(|lib| {
                let mut row = self.process_library(&ids, *lib);
                if *lib == Lib::Uct {
                    row.modules = modules.clone();
                }
                row
            })
            .collect()
    }

    fn process_library(&self, ids: &std::collections::BTreeSet<(u64, u64)>, lib: Lib) -> ProcessLibrary {
        let files: Vec<&LibAttachment> = ids
            .iter()
            .filter_map(|id| self.libs.get(id))
            .filter(|a| a.lib == lib)
            .collect();
        let (path, status, detail) = match files.first() {
            None => (
                None,
                Status::Unavailable,
                format!("{} is not mapped by this process", lib.name()),
            ),
            Some(a) if a.symbols.is_empty() => (
                Some(a.path.clone()),
                Status::Unavailable,
                if a.errors.is_empty() {
                    "none of the table's symbols is exported".into()
                } else {
                    a.errors.join("; ")
                },
            ),
            Some(a) => (
                Some(a.path.clone()),
                Status::Attached,
                if a.missing.is_empty() {
                    format!("{} symbols attached", a.symbols.len())
                } else {
                    format!(
                        "{} symbols attached; not exported: {}",
                        a.symbols.len(),
                        a.missing.join(", ")
                    )
                },
            ),
        };
        ProcessLibrary {
            lib,
            path,
            status,
            detail,
            modules: Vec::new(),
        }
    }
}

/// Names of the set-up rows among `points`.
fn dropped_rows(points: &[Point]) -> Vec<&'static str> {
    let mut rows: Vec<&'static str> = points
        .iter()
        .filter(|p| p.group == uprobes::Group::Setup)
        .filter_map(|p| uapi::row_of(p.op).map(|(_, r)| r.symbol))
        .collect();
    rows.dedup();
    rows
}

/// Names of the table rows of `group` that a file exports.
fn group_rows(a: &LibAttachment, group: uprobes::Group) -> Vec<&'static str> {
    uapi::TABLE
        .iter()
        .filter(|r| r.lib == a.lib && r.group() == group && !a.missing.contains(&r.symbol))
        .map(|r| r.symbol)
        .collect()
}
