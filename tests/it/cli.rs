//! The command line as a newcomer meets it: help with examples, and a clear
//! line without the privilege to trace (bad input: bad_input.rs).
use integration_tests::{can_trace, gdrtrace_path, run, stderr};

#[test]
fn not_root_no_bpf_permission() {
    if !can_trace("not_root_no_bpf_permission") {
        return;
    }
    // setpriv (util-linux) drops to nobody with no capabilities.
    let Ok(o) = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
        .arg(gdrtrace_path())
        .args(["run", "--", "true"])
        .output()
    else {
        println!("skipping: not_root_no_bpf_permission: setpriv is not installed");
        return;
    };
    let err = stderr(&o);
    assert!(!o.status.success(), "unprivileged run succeeded: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "expected one line, got:\n{err}");
    assert!(err.contains("run as root") || err.contains("ermission"), "{err}");
}

#[test]
fn help_has_examples() {
    let o = run(&["--help"]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("Examples:") && out.contains("gdrtrace run --"), "{out}");
}

/// Under CI (`CI=true`) a test that needs BPF fails without the privilege
/// instead of passing having run nothing; elsewhere it says `skipping:`.
/// This test binary runs one of its own tests again as nobody.
#[test]
fn missing_privilege_fails_under_ci() {
    if !can_trace("missing_privilege_fails_under_ci") {
        return;
    }
    let dir = integration_tests::scratch("ci");
    let copy = dir.join("cli-tests");
    std::fs::copy(std::env::current_exe().expect("test binary"), &copy).expect("copying the test binary");
    let _ = std::process::Command::new("chmod")
        .arg("755")
        .arg(&dir)
        .arg(&copy)
        .status();
    for (ci, must_pass, expect) in [
        ("true", false, "this run must trace"),
        ("false", true, "skipping: not_root_no_bpf_permission: needs root"),
    ] {
        let Ok(o) = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
            .arg(&copy)
            .args([
                "--exact",
                "cli::not_root_no_bpf_permission",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("CI", ci)
            .env_remove("GDRTRACE_REQUIRE_TRACE")
            .output()
        else {
            println!("skipping: missing_privilege_fails_under_ci: setpriv is not installed");
            return;
        };
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(o.status.success(), must_pass, "CI={ci}: {all}");
        assert!(all.contains(expect), "CI={ci}: want '{expect}' in {all}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
