//! Small helpers shared by the subcommands.

use std::cmp::Ordering;
use std::io::{BufRead as _, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// The workspace root: the parent of this crate's manifest directory.
pub fn repo_root() -> Result<PathBuf> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .map(Path::to_path_buf)
        .with_context(|| format!("{} has no parent directory", manifest.display()))
}

/// `<repo>/target`, honouring nothing but the repository layout: the VM cache
/// lives with the sources, not with whatever CARGO_TARGET_DIR the build used.
pub fn target_dir() -> Result<PathBuf> {
    Ok(repo_root()?.join("target"))
}

/// Runs a command to completion, inheriting stdio; fails on a non-zero exit.
pub fn run_status(cmd: &mut Command) -> Result<()> {
    let what = describe(cmd);
    let status = cmd.status().with_context(|| format!("cannot start `{what}`"))?;
    if !status.success() {
        bail!("`{what}` failed ({status})");
    }
    Ok(())
}

/// Runs a command and returns its stdout; stderr is captured and reported on failure.
pub fn run_output(cmd: &mut Command) -> Result<String> {
    let what = describe(cmd);
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot start `{what}`"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let err = err.trim().lines().last().unwrap_or("");
        bail!("`{what}` failed ({}): {err}", out.status);
    }
    String::from_utf8(out.stdout).with_context(|| format!("`{what}` printed non-UTF-8 output"))
}

pub fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Looks a program up on PATH.
pub fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(prog)).find(|p| p.is_file())
}

/// Quotes a string for a POSIX shell.
pub fn sh_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Natural ("version") ordering: runs of digits compare numerically, the rest
/// byte-wise. Good enough to order kernel release strings such as
/// `6.12.90+deb12-amd64` < `6.12.90+deb12.1-amd64` < `6.12.117+deb12-amd64`.
pub fn version_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let na = a.iter().take_while(|c| c.is_ascii_digit()).count();
                let nb = b.iter().take_while(|c| c.is_ascii_digit()).count();
                let (da, db) = (trim_zeros(&a[..na]), trim_zeros(&b[..nb]));
                let ord = da.len().cmp(&db.len()).then_with(|| da.cmp(db));
                if ord != Ordering::Equal {
                    return ord;
                }
                a = &a[na..];
                b = &b[nb..];
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                a = &a[1..];
                b = &b[1..];
            }
        }
    }
}

fn trim_zeros(d: &[u8]) -> &[u8] {
    let n = d.iter().take_while(|&&c| c == b'0').count();
    &d[n..]
}

/// Lines of a child's pipe, each with the moment it arrived.
pub fn timed_lines(r: impl Read + Send + 'static) -> mpsc::Receiver<(Instant, String)> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines().map_while(std::result::Result::ok) {
            if tx.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_order() {
        let mut v = vec![
            "6.12.117+deb12-amd64",
            "6.12.90+deb12.1-amd64",
            "6.12.9+deb12-amd64",
            "6.12.90+deb12-amd64",
        ];
        v.sort_by(|a, b| version_cmp(a, b));
        assert_eq!(
            v,
            [
                "6.12.9+deb12-amd64",
                "6.12.90+deb12-amd64",
                "6.12.90+deb12.1-amd64",
                "6.12.117+deb12-amd64"
            ]
        );
        assert_eq!(version_cmp("6.1.0-57-amd64", "6.1.0-9-amd64"), Ordering::Greater);
    }

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("target/debug/gdrtrace"), "target/debug/gdrtrace");
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
        assert_eq!(sh_quote(""), "''");
    }
}
