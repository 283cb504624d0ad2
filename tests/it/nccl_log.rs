//! `gdrtrace explain REPORT --nccl-log LOG` on real 2×H200 reports and the
//! NCCL_DEBUG=INFO logs of the same runs (tests/fixtures/): the probe-based
//! verdicts agree with NCCL's own channel lines, per rank and per
//! communicator, and a log of another mode is reported as disagreeing.
use std::path::Path;

use integration_tests::{fixture, read_report, run, stderr, stdout};

fn explain(report: &str, log: &str) -> String {
    let o = run(&["explain", &fixture(report), "--nccl-log", log]);
    assert!(o.status.success(), "explain {report}: {}", stderr(&o));
    stdout(&o)
}

#[test]
fn verdicts_agree_with_nccl_log_in_every_mode() {
    for (mode, via, var) in [
        ("auto", "via P2P/CUMEM", None),
        ("no-p2p", "via SHM/direct/direct", Some("NCCL_P2P_DISABLE=1")),
        ("no-p2p-no-shm", "via NET/Socket/0", Some("NCCL_SHM_DISABLE=1")),
    ] {
        let out = explain(
            &format!("reports/nccl-{mode}.json"),
            &fixture(&format!("logs/nccl-{mode}.log")),
        );
        let agree = out
            .lines()
            .filter(|l| l.contains(via) && l.contains("(agrees)"))
            .count();
        // Two ranks, each: the per-process line and the per-communicator line.
        assert_eq!(agree, 4, "{mode}:\n{out}");
        assert!(!out.to_lowercase().contains("disagrees"), "{mode}:\n{out}");
        match var {
            Some(v) => assert!(out.contains("[nccl-env-forced]") && out.contains(v), "{mode}:\n{out}"),
            None => assert!(!out.contains("[nccl-env-forced]"), "{mode}:\n{out}"),
        }
    }
}

#[test]
fn a_log_of_another_mode_disagrees() {
    // The no-p2p run's log, its pids rewritten to the auto run's ranks.
    let log = std::fs::read_to_string(fixture("logs/nccl-no-p2p.log")).unwrap();
    let report = read_report(Path::new(&fixture("reports/nccl-auto.json")));
    let other = read_report(Path::new(&fixture("reports/nccl-no-p2p.json")));
    let mut rewritten = log.clone();
    for (from, to) in other.verdicts.iter().zip(&report.verdicts) {
        rewritten = rewritten.replace(&format!(":{}:", from.pid), &format!(":{}:", to.pid));
    }
    assert_ne!(rewritten, log);
    let path = std::env::temp_dir().join(format!("gdrtrace-nccl-log-{}.log", std::process::id()));
    std::fs::write(&path, rewritten).unwrap();
    let out = explain("reports/nccl-auto.json", path.to_str().unwrap());
    let _ = std::fs::remove_file(&path);
    assert!(
        out.lines()
            .any(|l| l.contains("via SHM/direct/direct") && l.to_lowercase().contains("disagrees")),
        "{out}"
    );
}
