use super::*;

#[test]
fn labels_like_bpftrace() {
    assert_eq!(human(512), "512");
    assert_eq!(human(1024), "1K");
    assert_eq!(human(2 << 20), "2M");
    let mut s = String::new();
    histogram(
        &mut s,
        "@x (ns):",
        &[
            Bucket {
                min: 1024,
                max: 2048,
                count: 4,
            },
            Bucket {
                min: 2048,
                max: 4096,
                count: 2,
            },
        ],
    );
    assert!(s.contains("[1K, 2K)"), "{s}");
    assert!(s.contains(&format!("|{}|", "@".repeat(52))), "{s}");
    assert!(s.contains(&format!("|{}{}|", "@".repeat(26), " ".repeat(26))), "{s}");
}

/// Issue 12: the report of `validate` on this kind of host (no fentry,
/// no kprobes) fits on one screen above the histograms, with each
/// unavailable family named once and its reason written once.
#[test]
fn coverage_grouped_and_summary_on_one_screen() {
    let (r, _) = crate::fixtures::replay_fixture("pin-churn");
    let text = render_with(&r, false);
    let summary: Vec<&str> = text.lines().take_while(|l| !l.starts_with('@')).collect();
    assert!(summary.len() <= 50, "{} lines:\n{}", summary.len(), summary.join("\n"));
    for (family, signal) in [
        (crate::probes::Family::Pinning, "kernel page pinning"),
        (crate::probes::Family::DmaBuf, "dma-buf attach/map"),
    ] {
        let points = r.coverage.iter().filter(|c| c.family == family).count();
        let reason = r
            .coverage
            .iter()
            .find(|c| c.family == family)
            .and_then(|c| c.reason.clone())
            .unwrap();
        let line = summary
            .iter()
            .find(|l| l.contains(signal))
            .unwrap_or_else(|| panic!("{signal} missing:\n{text}"));
        // The refusal once: the second family refused alike points to the first.
        let said = if family == crate::probes::Family::Pinning {
            format!("unavailable  {points} points: {reason}")
        } else {
            format!("unavailable  {points} points: as kernel page pinning (above)")
        };
        assert!(line.contains(&said), "{line}");
    }
    assert!(
        !summary.iter().any(|l| l.contains("pin_user_pages_fast")),
        "points only with -v"
    );
    let detail = render_with(&r, true);
    assert!(detail.contains("pin_user_pages_fast"), "-v lists each point");
}

/// A family partly attached (a VM kernel: fentry for some functions,
/// others missing): measured, with the missing points named once.
#[test]
fn a_partly_attached_family_names_what_is_missing() {
    use crate::probes::{Coverage, Family};
    let mut r = crate::report::tests_support::empty_report();
    let point = |name: &str, status, via, reason: Option<&str>| Coverage {
        point: name.into(),
        family: Family::Pinning,
        status,
        via,
        reason: reason.map(String::from),
        tried: Vec::new(),
        detail: Vec::new(),
    };
    r.coverage = vec![
        point("pin_user_pages_fast", Status::Attached, Some("fentry/fexit"), None),
        point("unpin_user_pages", Status::Attached, Some("fentry/fexit"), None),
        point("unpin_folio", Status::Unavailable, None, Some("not in /proc/kallsyms")),
        point(
            "unpin_user_folio",
            Status::Unavailable,
            None,
            Some("not in /proc/kallsyms"),
        ),
    ];
    r.signals = crate::report::signals(&r.coverage, true);
    let text = render_with(&r, false);
    let line = text.lines().find(|l| l.contains("kernel page pinning")).expect(&text);
    assert!(
        line.contains("measured") && line.contains("pin_user_pages_fast (fentry/fexit)"),
        "{line}"
    );
    assert!(
        text.contains("also 2 points: not in /proc/kallsyms"),
        "the missing points stay named:\n{text}"
    );
}

/// The kernel counted the collectives: the operations table shows them.
#[test]
fn aggregated_collectives_in_the_operations_table() {
    let mut r = crate::report::tests_support::empty_report();
    for (pid, comm) in [(7, "0x1"), (8, "0x2")] {
        r.collectives.push(crate::report::Collective {
            lower_bound: false,
            pid,
            op: "ncclAllReduce".into(),
            communicator: comm.into(),
            calls: 14_500,
            bytes: 1 << 30,
            transport: "p2p/nvlink",
            counted: None,
            comm_id: None,
            rank: None,
            nranks: None,
        });
    }
    r.kernel_histograms.push(crate::report::KernelHistogram {
        name: "ncclAllReduce".into(),
        calls: 29_000,
        unit: "ns",
        buckets: vec![
            Bucket {
                min: 8192,
                max: 16384,
                count: 28_000,
            },
            Bucket {
                min: 65536,
                max: 131072,
                count: 1_000,
            },
        ],
    });
    let text = render_with(&r, false);
    assert!(!text.contains("(no traced calls)"), "{text}");
    let row = text
        .lines()
        .find(|l| l.contains("ncclAllReduce (kernel)"))
        .expect(&text);
    for part in ["p2p/nvlink", "29000", "2.00GiB", "<=16.4us", "<=131.1us"] {
        assert!(row.contains(part), "{part}: {row}");
    }
}

/// The Signals block of every shipped recording's report: one line per
/// signal and family (a second, `also`, where a measured family lost some
/// points), no refusal written twice. Before, the five nvidia_p2p points
/// of the GPU recordings, refused alike but each naming its own function,
/// took five ~190-character lines; and an `attach` recording said a library
/// it never looked for was "neither installed nor mapped".
#[test]
fn signals_are_one_line_per_family_in_every_recording() {
    for name in crate::fixtures::names() {
        let (r, _) = crate::fixtures::replay_fixture(&name);
        let text = render_with(&r, false);
        let block: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("Signals"))
            .skip(1)
            .take_while(|l| !l.is_empty())
            .collect();
        assert!(!block.is_empty(), "{name}: a Signals block:\n{text}");
        let mut labels = std::collections::BTreeSet::new();
        for l in &block {
            let label = l.get(2..48).unwrap_or("").trim();
            if label.is_empty() {
                let rest = l.trim_start();
                assert!(
                    rest.starts_with("also "),
                    "{name}: a continuation line:\n{}",
                    block.join("\n")
                );
            } else {
                let outcome = l.get(58..70).unwrap_or("").trim();
                assert!(
                    labels.insert((label, outcome)),
                    "{name}: {label} twice:\n{}",
                    block.join("\n")
                );
            }
        }
        let refusals: Vec<&str> = block
            .iter()
            .filter_map(|l| l.split_once(": ").map(|(_, r)| r))
            .collect();
        for (i, a) in refusals.iter().enumerate() {
            assert!(
                a.len() < 40 || !refusals[..i].contains(a),
                "{name}: {a} twice:\n{}",
                block.join("\n")
            );
        }
        assert!(
            !text.contains("neither installed nor mapped"),
            "{name}:\n{}",
            block.join("\n")
        );
    }
}

/// Refusals that differ only by the point they name are one group.
#[test]
fn refusals_naming_their_own_point_fold() {
    assert_eq!(
        super::coverage::generic(
            "fentry/fexit: unknown BTF type `nvidia_p2p_put_pages`",
            "nvidia_p2p_put_pages"
        ),
        "fentry/fexit: unknown BTF type `<point>`"
    );
    // Not inside a longer name.
    assert_eq!(
        super::coverage::generic("see nvidia_p2p_put_pages_persistent", "nvidia_p2p_put_pages"),
        "see nvidia_p2p_put_pages_persistent"
    );
}

/// Issue 48: `explain` of the two-node recording said "pid 543
/// cuMemcpyHtoDAsync host-staged: 8 transfers" twice, and the same of pid
/// 544, while the operations table had 8 calls for both together. Now each
/// path line is written once, and a line about an operation's calls gives
/// that process's own count (the counts of its processes add up to the
/// table's). Every shipped recording: no Explain line twice.
#[test]
fn explain_paths_once_and_per_process() {
    let (r, _) = crate::fixtures::replay_fixture("gpu-h200-nodes-run-default");
    let paths = &r.explain.paths;
    assert!(!paths.is_empty(), "the recording has staged paths");
    for op in &r.operations {
        let lines: Vec<_> = paths
            .iter()
            .filter(|p| p.what.starts_with(&format!("{} ", op.name)))
            .collect();
        let mut pids: Vec<u32> = lines.iter().map(|p| p.pid).collect();
        pids.sort();
        pids.dedup();
        assert_eq!(pids.len(), lines.len(), "{}: a line per process: {lines:#?}", op.name);
        for p in &lines {
            let mine = r
                .processes
                .iter()
                .find(|x| x.pid == p.pid)
                .and_then(|x| x.calls.get(&op.name))
                .copied();
            let Some(n) = mine else { continue };
            if n != op.calls {
                assert!(
                    p.what.contains(&format!(": {n} calls of this process")),
                    "pid {} made {n} of the {} calls: {}",
                    p.pid,
                    op.calls,
                    p.what
                );
            }
        }
    }
    for name in crate::fixtures::names() {
        let (r, _) = crate::fixtures::replay_fixture(&name);
        let text = super::explain(&r);
        let mut seen = std::collections::BTreeSet::new();
        for l in text.lines().skip(1).take_while(|l| !l.is_empty()) {
            assert!(seen.insert(l), "{name}: {l} twice:\n{text}");
        }
    }
}
