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
/// unavailable family named once with its reason.
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
        assert!(
            line.contains(&format!("unavailable  {points} points: {reason}")),
            "{line}"
        );
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
