//! The kernel-upgrade example: each guest recorded a baseline
//! (`gdrtrace baseline record`, tests/vm/checks/20-validate.sh); the oldest
//! kernel's is the baseline and the newest's is compared against it with
//! `gdrtrace compare --allow-profile-change`, written to
//! `target/vm-results/compare.{txt,md,html}`.
//!
//! What counts: exit 0 (no regression) and 1 (regressions: latencies under
//! software emulation move between kernels, probe points change) are both
//! results; the vm-test fails only when the comparison could not be made
//! (exit 2, or no baseline) or does not list the kernel change at the top.
use std::{fs, path::Path, process::Command};

use anyhow::{Context, Result, bail};

/// Runs the comparison; returns its exit status (0 or 1).
pub fn compare(bin: &Path, dir: &Path, base_release: &str, cur_release: &str) -> Result<i32> {
    let base = dir.join(base_release).join("baseline.json");
    let cur = dir.join(cur_release).join("baseline.json");
    for b in [&base, &cur] {
        if !b.is_file() {
            bail!(
                "{} is missing (check 20-validate did not record a baseline)",
                b.display()
            );
        }
    }
    let html = dir.join("compare.html");
    let run = |format: &str, html: Option<&Path>| -> Result<(i32, String, String)> {
        let mut cmd = Command::new(bin);
        cmd.arg("compare")
            .arg(&base)
            .arg(&cur)
            .args(["--allow-profile-change", "--format", format]);
        if let Some(h) = html {
            cmd.arg("--html").arg(h);
        }
        let o = cmd
            .output()
            .with_context(|| format!("running {} compare", bin.display()))?;
        Ok((
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        ))
    };
    let (code, text, err) = run("text", Some(&html))?;
    if code != 0 && code != 1 {
        bail!(
            "gdrtrace compare {base_release} -> {cur_release} could not compare (exit {code}): {}",
            err.trim()
        );
    }
    fs::write(dir.join("compare.txt"), &text).context("writing compare.txt")?;
    let (code_md, md, _) = run("markdown", None)?;
    fs::write(dir.join("compare.md"), &md).context("writing compare.md")?;
    if code_md != code {
        bail!("compare exited {code} for text but {code_md} for Markdown");
    }
    // The profile section comes before any workload, and names the kernels.
    let profile_at = text.find("Profile differences");
    let workload_at = text.find("\nWorkload ").unwrap_or(text.len());
    let kernel_listed = text
        .lines()
        .any(|l| l.trim_start().starts_with("kernel ") && l.contains(" -> "));
    if profile_at.is_none_or(|p| p >= workload_at) || !kernel_listed {
        bail!(
            "the comparison does not list the kernel change {base_release} -> {cur_release} at the top (see compare.txt)"
        );
    }
    println!("{text}");
    println!(
        "vm-test: kernel upgrade {base_release} -> {cur_release}: compare exit {code} ({}); target/vm-results/compare.{{txt,md,html}}",
        if code == 0 {
            "no regression"
        } else {
            "regressions listed above"
        }
    );
    Ok(code)
}
