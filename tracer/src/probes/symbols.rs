//! ELF symbol resolution for uprobes: every defined function symbol of a
//! file (`.dynsym` first: stripped libraries have nothing else; `.symtab`
//! too, for executables), with its ELF symbol version, turned into the file
//! offset the kernel's uprobe interface wants.
//!
//! Versioned symbols matter: Debian's libibverbs exports both
//! `ibv_reg_mr@IBVERBS_1.0` and `ibv_reg_mr@@IBVERBS_1.1` at different
//! addresses; a probe on one of them misses callers of the other.
use std::{fs, path::Path};

use object::{Object as _, ObjectSection as _, ObjectSymbol as _, SymbolKind, elf::FileHeader64, read::elf::ElfFile};

use crate::error::{Error, Result};

/// One function symbol of a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    pub name: String,
    /// ELF symbol version (`IBVERBS_1.1`), if the symbol carries one.
    pub version: Option<String>,
    /// Virtual address (st_value).
    pub address: u64,
    /// Offset in the file of its probe point, for
    /// `UProbeAttachLocation::AbsoluteOffset`: its first instruction, or
    /// the one after a leading `endbr64` (`insn::probe_point`).
    pub file_offset: u64,
    /// The instruction there is single-stepped by a uprobe (a second trap
    /// on every hit: `insn.rs`).
    pub stepped: bool,
}

impl Symbol {
    /// `name@VERSION` as readelf prints it (or the bare name).
    pub fn display(&self) -> String {
        match &self.version {
            Some(v) => format!("{}@{}", self.name, v),
            None => self.name.clone(),
        }
    }
}

/// All defined function symbols of an ELF file.
pub fn functions(path: &Path) -> Result<Vec<Symbol>> {
    let data = fs::read(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    let elf = ElfFile::<FileHeader64<object::Endianness>>::parse(&*data)
        .map_err(|e| Error::Usage(format!("{} is not a 64-bit ELF file: {e}", path.display())))?;
    let endian = elf.endian();
    let versions = elf.elf_section_table().versions(endian, &*data).ok().flatten();
    let mut out = Vec::new();
    let mut push = |sym: &object::read::elf::ElfSymbol<'_, '_, FileHeader64<object::Endianness>, &[u8]>,
                    dynamic: bool| {
        if sym.kind() != SymbolKind::Text || sym.is_undefined() || sym.address() == 0 {
            return;
        }
        let Ok(name) = sym.name() else { return };
        let Some(section) = sym.section_index().and_then(|i| elf.section_by_index(i).ok()) else {
            return;
        };
        let Some((sec_off, _)) = section.file_range() else {
            return;
        };
        let Some(rel) = sym.address().checked_sub(section.address()) else {
            return;
        };
        let version = if dynamic {
            versions.as_ref().and_then(|t| {
                let idx = t.version_index(endian, sym.index());
                t.version(idx)
                    .ok()
                    .flatten()
                    .map(|v| String::from_utf8_lossy(v.name()).into_owned())
            })
        } else {
            None
        };
        // `.symtab` spells versions into the name (`foo@VER`); keep the base.
        let (base, ver) = match name.split_once('@') {
            Some((b, v)) => (b, version.or_else(|| Some(v.trim_start_matches('@').to_string()))),
            None => (name, version),
        };
        let (file_offset, stepped) = super::insn::probe_point(&data, sec_off + rel);
        out.push(Symbol {
            name: base.to_string(),
            version: ver,
            address: sym.address(),
            file_offset,
            stepped,
        });
    };
    for sym in elf.dynamic_symbols() {
        push(&sym, true);
    }
    for sym in elf.symbols() {
        push(&sym, false);
    }
    // The same function often appears in both tables: keep one per address.
    out.sort_by_key(|a| (a.address, a.version.is_none()));
    out.dedup_by(|a, b| a.address == b.address && a.name == b.name);
    Ok(out)
}
