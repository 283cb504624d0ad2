//! `vm-kernels`: resolve, download, unpack and cache stock Debian kernels.
//!
//! Layout under `<repo>/target/vm/`:
//! - `kernels/<series>.release`: the release last resolved for a series
//!   (`6.1`, `6.12`), so a cache hit needs no apt look-up at all;
//! - `kernels/<release>/`: the unpacked `linux-image-*` package (`boot/vmlinuz-*`,
//!   `lib/modules/<release>` with depmod's indexes), complete once
//!   `.xtask-complete` exists;
//! - `debs/`: download scratch space, emptied after unpacking.
//!
//! virtme-ng loads modules from the host's `/lib/modules/<release>`, which is
//! made a symlink into the cache.

use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::ValueEnum;

use crate::util::{run_output, run_status, target_dir, version_cmp};

const COMPLETE_MARKER: &str = ".xtask-complete";
const BACKPORTS_FILE: &str = "/etc/apt/sources.list.d/xtask-backports.sources";
const DEBIAN_KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// A kernel series the VM tier tests on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Series {
    /// Debian 12's own kernel, `linux-image-6.1.0-N-amd64`.
    #[value(name = "6.1")]
    V6_1,
    /// The 6.12 kernel for Debian 12, `linux-image-6.12.N+deb12-amd64`
    /// (bookworm-security or bookworm-backports, whichever is newer).
    #[value(name = "6.12")]
    V6_12,
}

/// `--kernel` for commands that can run on several kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Selection {
    #[value(name = "6.1")]
    V6_1,
    #[value(name = "6.12")]
    V6_12,
    #[value(name = "all")]
    All,
}

impl Selection {
    pub fn series(self) -> Vec<Series> {
        match self {
            Selection::V6_1 => vec![Series::V6_1],
            Selection::V6_12 => vec![Series::V6_12],
            Selection::All => vec![Series::V6_1, Series::V6_12],
        }
    }
}

impl Series {
    pub fn name(self) -> &'static str {
        match self {
            Series::V6_1 => "6.1",
            Series::V6_12 => "6.12",
        }
    }

    /// The apt-cache search pattern that finds candidate packages.
    fn search_pattern(self) -> &'static str {
        match self {
            Series::V6_1 => r"^linux-image-6\.1\.0-",
            Series::V6_12 => r"^linux-image-6\.12\.",
        }
    }

    /// The kernel release of `pkg` if it is a generic amd64 image of this
    /// series (not cloud/rt/dbg/unsigned/meta).
    fn release_of(self, pkg: &str) -> Option<String> {
        let rel = pkg.strip_prefix("linux-image-")?.strip_suffix("-amd64")?;
        let ok = match self {
            // 6.1.0-57
            Series::V6_1 => all_digits(rel.strip_prefix("6.1.0-")?),
            // 6.12.117+deb12, 6.12.90+deb12.1, 6.12.95+bpo
            Series::V6_12 => {
                let (point, abi) = rel.strip_prefix("6.12.")?.split_once('+')?;
                let rest = if let Some(r) = abi.strip_prefix("deb") {
                    r.trim_start_matches(|c: char| c.is_ascii_digit())
                } else {
                    abi.strip_prefix("bpo")?
                };
                all_digits(point) && abi != "deb" && (rest.is_empty() || rest.strip_prefix('.').is_some_and(all_digits))
            }
        };
        ok.then(|| format!("{rel}-amd64"))
    }

    fn wants_backports(self) -> bool {
        matches!(self, Series::V6_12)
    }
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

#[derive(clap::Args)]
pub struct Args {
    /// Which kernel(s) to fetch.
    #[arg(long, value_enum, default_value = "all")]
    kernel: Selection,
    /// Look for a newer point release even when one is cached (runs apt-get update).
    #[arg(long)]
    refresh: bool,
}

/// A cached, ready-to-boot kernel.
#[derive(Clone, Debug)]
pub struct Kernel {
    pub series: Series,
    pub release: String,
    pub dir: PathBuf,
}

impl Kernel {
    pub fn vmlinuz(&self) -> PathBuf {
        self.dir.join("boot").join(format!("vmlinuz-{}", self.release))
    }
}

pub fn main(args: &Args) -> Result<ExitCode> {
    let mut done = Vec::new();
    for series in args.kernel.series() {
        let t = Instant::now();
        let k = ensure(series, args.refresh)?;
        eprintln!(
            "vm-kernels: {} ready in {:.1}s: {}",
            series.name(),
            t.elapsed().as_secs_f64(),
            k.vmlinuz().display()
        );
        done.push(k);
    }
    for k in &done {
        println!("{}\t{}", k.series.name(), k.release);
    }
    Ok(ExitCode::SUCCESS)
}

fn kernels_dir() -> Result<PathBuf> {
    Ok(target_dir()?.join("vm").join("kernels"))
}

fn is_complete(dir: &Path) -> bool {
    dir.join(COMPLETE_MARKER).is_file()
}

/// Returns the cached kernel of `series`, fetching it first if needed.
/// Without `refresh`, a complete cache entry is used with no apt look-up.
pub fn ensure(series: Series, refresh: bool) -> Result<Kernel> {
    let kdir = kernels_dir()?;
    let pointer = kdir.join(format!("{}.release", series.name()));
    if !refresh && let Ok(rel) = fs::read_to_string(&pointer) {
        let release = rel.trim().to_string();
        let dir = kdir.join(&release);
        if !release.is_empty() && is_complete(&dir) {
            let k = Kernel { series, release, dir };
            link_modules(&k)?;
            return Ok(k);
        }
    }

    let (pkg, release) = resolve(series, refresh)?;
    let dir = kdir.join(&release);
    if !is_complete(&dir) {
        eprintln!("vm-kernels: {}: fetching {pkg}", series.name());
        fetch(&pkg, &release, &dir)?;
    }
    fs::write(&pointer, format!("{release}\n")).with_context(|| format!("cannot write {}", pointer.display()))?;
    let k = Kernel { series, release, dir };
    link_modules(&k)?;
    Ok(k)
}

/// Finds the newest package of `series` that apt can fetch; returns (package, release).
fn resolve(series: Series, refresh: bool) -> Result<(String, String)> {
    let mut updated = false;
    if series.wants_backports() && ensure_backports_source()? {
        apt_update()?;
        updated = true;
    }
    if refresh && !updated {
        apt_update()?;
        updated = true;
    }
    let mut found = search(series)?;
    if found.is_empty() && !updated {
        // A fresh machine may have no (or stale) package lists.
        apt_update()?;
        found = search(series)?;
    }
    found
        .into_iter()
        .max_by(|a, b| version_cmp(&a.1, &b.1))
        .with_context(|| {
            format!(
                "no linux-image package for kernel {} found by apt-cache (pattern {})",
                series.name(),
                series.search_pattern()
            )
        })
}

/// Packages of `series` known to apt that have an installable candidate.
fn search(series: Series) -> Result<Vec<(String, String)>> {
    let out = run_output(Command::new("apt-cache").args(["search", "--names-only", series.search_pattern()]))?;
    let names: Vec<(String, String)> = out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|pkg| series.release_of(pkg).map(|rel| (pkg.to_string(), rel)))
        .collect();
    if names.is_empty() {
        return Ok(names);
    }
    // apt-cache search also lists names from old list entries; keep those
    // with a candidate version.
    let policy = run_output(
        Command::new("apt-cache")
            .arg("policy")
            .args(names.iter().map(|(p, _)| p)),
    )?;
    let mut with_candidate = Vec::new();
    let mut current: Option<&str> = None;
    for line in policy.lines() {
        if !line.starts_with(' ') {
            current = line.strip_suffix(':');
        } else if let Some(cand) = line.trim().strip_prefix("Candidate:")
            && cand.trim() != "(none)"
            && let Some(pkg) = current
        {
            with_candidate.push(pkg.to_string());
        }
    }
    Ok(names
        .into_iter()
        .filter(|(p, _)| with_candidate.iter().any(|c| c == p))
        .collect())
}

fn apt_update() -> Result<()> {
    eprintln!("vm-kernels: apt-get update");
    run_status(
        Command::new("apt-get")
            .args(["update", "-qq"])
            .stdin(Stdio::null())
            .stdout(Stdio::null()),
    )
}

/// Adds `<codename>-backports` to apt's sources unless some source already
/// names it. Returns whether it added one (apt-get update is then due).
fn ensure_backports_source() -> Result<bool> {
    let codename = os_codename()?;
    let suite = format!("{codename}-backports");
    let mut files = vec![PathBuf::from("/etc/apt/sources.list")];
    if let Ok(rd) = fs::read_dir("/etc/apt/sources.list.d") {
        files.extend(
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "list" || x == "sources")),
        );
    }
    for f in &files {
        if let Ok(text) = fs::read_to_string(f)
            && text
                .lines()
                .filter(|l| !l.trim_start().starts_with('#'))
                .any(|l| l.split_whitespace().any(|w| w == suite))
        {
            return Ok(false);
        }
    }
    let signed_by = if Path::new(DEBIAN_KEYRING).is_file() {
        format!("Signed-By: {DEBIAN_KEYRING}\n")
    } else {
        String::new()
    };
    let text = format!(
        "# Added by `cargo xtask vm-kernels` (gdrtrace VM tests).\n\
         Types: deb\nURIs: http://deb.debian.org/debian\nSuites: {suite}\nComponents: main\n{signed_by}"
    );
    eprintln!("vm-kernels: adding {suite} to apt sources ({BACKPORTS_FILE})");
    fs::write(BACKPORTS_FILE, text).with_context(|| format!("cannot write {BACKPORTS_FILE}"))?;
    Ok(true)
}

fn os_codename() -> Result<String> {
    let text = fs::read_to_string("/etc/os-release").context("cannot read /etc/os-release")?;
    text.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim_matches('"').to_string())
        .filter(|v| !v.is_empty())
        .context("/etc/os-release has no VERSION_CODENAME (not Debian?)")
}

/// Downloads `pkg` (or its `-unsigned` twin if `pkg` has no image), unpacks it
/// into `dir` and runs depmod there.
fn fetch(pkg: &str, release: &str, dir: &Path) -> Result<()> {
    let vm = target_dir()?.join("vm");
    let debs = vm.join("debs");
    fs::create_dir_all(&debs).with_context(|| format!("cannot create {}", debs.display()))?;
    // Not with_extension: releases contain dots.
    let partial = dir.with_file_name(format!("{release}.partial"));
    if let Some(parent) = dir.parent() {
        fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    }

    let vmlinuz = format!("boot/vmlinuz-{release}");
    let modules = format!("lib/modules/{release}");
    let mut tried = Vec::new();
    let mut ok = false;
    for cand in [pkg.to_string(), format!("{pkg}-unsigned")] {
        remove_debs(&debs, &cand)?;
        run_status(
            Command::new("apt-get")
                .args(["download", "-qq", "-o", "APT::Sandbox::User=root", &cand])
                .current_dir(&debs)
                .stdin(Stdio::null())
                .stdout(Stdio::null()),
        )?;
        let deb = find_deb(&debs, &cand)?;
        if partial.exists() {
            fs::remove_dir_all(&partial).with_context(|| format!("cannot remove {}", partial.display()))?;
        }
        run_status(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&partial))?;
        fs::remove_file(&deb).with_context(|| format!("cannot remove {}", deb.display()))?;
        tried.push(cand);
        if partial.join(&vmlinuz).is_file() && partial.join(&modules).is_dir() {
            ok = true;
            break;
        }
    }
    if !ok {
        bail!("none of {} contains /{vmlinuz} and /{modules}", tried.join(", "));
    }

    run_status(
        Command::new("depmod")
            .arg("-b")
            .arg(&partial)
            .arg(release)
            .stdin(Stdio::null()),
    )?;
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("cannot remove {}", dir.display()))?;
    }
    fs::rename(&partial, dir).with_context(|| format!("cannot rename {} to {}", partial.display(), dir.display()))?;
    let marker = dir.join(COMPLETE_MARKER);
    fs::write(&marker, format!("{pkg}\n")).with_context(|| format!("cannot write {}", marker.display()))?;
    Ok(())
}

fn remove_debs(debs: &Path, pkg: &str) -> Result<()> {
    while let Ok(deb) = find_deb(debs, pkg) {
        fs::remove_file(&deb).with_context(|| format!("cannot remove {}", deb.display()))?;
    }
    Ok(())
}

fn find_deb(debs: &Path, pkg: &str) -> Result<PathBuf> {
    // apt-get download names files <pkg>_<version, ':' as %3a>_<arch>.deb.
    let prefix = format!("{pkg}_");
    fs::read_dir(debs)
        .with_context(|| format!("cannot read {}", debs.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".deb"))
        })
        .with_context(|| format!("apt-get download left no {prefix}*.deb in {}", debs.display()))
}

/// Makes `/lib/modules/<release>` point at the cached modules. A real
/// directory with a modules.dep (an installed kernel) is left alone.
fn link_modules(k: &Kernel) -> Result<()> {
    let sys = Path::new("/lib/modules").join(&k.release);
    let ours = k.dir.join("lib").join("modules").join(&k.release);
    let ours = ours
        .canonicalize()
        .with_context(|| format!("cached modules missing: {}", ours.display()))?;
    match fs::symlink_metadata(&sys) {
        Ok(m) if m.file_type().is_symlink() => {
            if fs::read_link(&sys).ok().as_deref() == Some(ours.as_path()) {
                return Ok(());
            }
            fs::remove_file(&sys).with_context(|| format!("cannot remove {}", sys.display()))?;
        }
        Ok(m) if m.is_dir() => {
            if sys.join("modules.dep").is_file() {
                return Ok(());
            }
            bail!(
                "{} exists but has no modules.dep and is not a link to {}; remove it",
                sys.display(),
                ours.display()
            );
        }
        Ok(_) => bail!("{} exists and is not a directory; remove it", sys.display()),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let parent = Path::new("/lib/modules");
            fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        Err(e) => return Err(e).with_context(|| format!("cannot stat {}", sys.display())),
    }
    symlink(&ours, &sys).with_context(|| format!("cannot link {} -> {}", sys.display(), ours.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_filter() {
        let s = Series::V6_1;
        assert_eq!(
            s.release_of("linux-image-6.1.0-57-amd64").as_deref(),
            Some("6.1.0-57-amd64")
        );
        assert_eq!(s.release_of("linux-image-6.1.0-57-cloud-amd64"), None);
        assert_eq!(s.release_of("linux-image-6.1.0-57-amd64-dbg"), None);
        assert_eq!(s.release_of("linux-image-6.1.0-57-rt-amd64"), None);

        let s = Series::V6_12;
        for ok in [
            "linux-image-6.12.117+deb12-amd64",
            "linux-image-6.12.90+deb12.1-amd64",
            "linux-image-6.12.9+bpo-amd64",
        ] {
            assert!(s.release_of(ok).is_some(), "{ok}");
        }
        for bad in [
            "linux-image-6.12-amd64",
            "linux-image-6.12.117+deb12-amd64-unsigned",
            "linux-image-6.12.117+deb12-cloud-amd64",
            "linux-image-6.12.117+deb12-rt-amd64",
            "linux-image-6.12-amd64-signed-template",
        ] {
            assert_eq!(s.release_of(bad), None, "{bad}");
        }
    }
}
