use super::*;

fn snapshot() -> Snapshot {
    Snapshot {
        node: "node-a".into(),
        processes: vec![ProcessFigures {
            pid: 42,
            comm: "python3".into(),
            pod: Some(PodLabels {
                namespace: "team-a".into(),
                pod: "trainer-0".into(),
                container: "worker".into(),
            }),
            discovered_by: "libnccl",
            processes: 1,
            verdict: Some(VerdictFigures {
                transport: "shm",
                host_staged: true,
                evidence_kind: "setup-calls",
                net: "",
                cause: "env-nccl-p2p-disable",
            }),
            comm_verdicts: vec![CommVerdict {
                communicator: "0x55d0".into(),
                rank: "1".into(),
                nranks: "2".into(),
                verdict: VerdictFigures {
                    transport: "shm",
                    host_staged: true,
                    evidence_kind: "setup-calls",
                    net: "",
                    cause: "env-nccl-p2p-disable",
                },
            }],
            communicators: vec![Communicator {
                handle: "0x55d0".into(),
                rank: "1".into(),
                nranks: "2".into(),
                op: "ncclAllReduce".into(),
                calls: 10,
                bytes: 4096,
                ..Default::default()
            }],
            moved_bytes: 4096,
            staged_bytes: 4096,
            registrations: vec![("io_uring", 3, 2)],
            ..Default::default()
        }],
        op_latency: vec![("ibv_reg_mr".into(), {
            let mut s = vec![0; MAX_SLOTS as usize];
            s[12] = 3;
            s[20] = 1;
            s
        })],
        lost: vec![("ringbuf_full", 0)],
        ..Default::default()
    }
}

#[test]
fn names_units_and_labels_follow_the_conventions() {
    let text = render(&snapshot(), Format::Text);
    for want in [
        "gdrtrace_registrations_total{node=\"node-a\",pid=\"42\",comm=\"python3\",namespace=\"team-a\",pod=\"trainer-0\",container=\"worker\",backing=\"io_uring\"} 3",
        "gdrtrace_deregistrations_total{node=\"node-a\",pid=\"42\",comm=\"python3\",namespace=\"team-a\",pod=\"trainer-0\",container=\"worker\",backing=\"io_uring\"} 2",
        "gdrtrace_host_staged_bytes_total{",
        "gdrtrace_moved_bytes_total{",
        "transport=\"shm\",host_staged=\"true\",evidence_kind=\"setup-calls\",net=\"\",cause=\"env-nccl-p2p-disable\",communicator=\"0x55d0\",rank=\"1\",nranks=\"2\"} 1",
        "gdrtrace_collective_bytes_total{",
        "# TYPE gdrtrace_operation_duration_seconds histogram",
        "gdrtrace_events_lost_total{node=\"node-a\",reason=\"ringbuf_full\"} 0",
    ] {
        assert!(text.contains(want), "missing {want} in\n{text}");
    }
    let om = render(&snapshot(), Format::OpenMetrics);
    assert!(om.ends_with("# EOF\n"), "OpenMetrics ends with EOF");
    assert!(om.contains("# UNIT gdrtrace_moved_bytes bytes"));
}

#[test]
fn log2_slots_become_exact_power_of_four_buckets() {
    let mut slots = vec![0u64; MAX_SLOTS as usize];
    slots[12] = 3; // [4096, 8192) ns: below 2^14 = 16.4 us
    slots[13] = 2; // [8192, 16384): below 2^14 too
    slots[14] = 1; // [16384, 32768): below 2^16
    slots[39] = 1; // clamped: only +Inf
    let h = Hist::from_slots(&slots);
    let at = |secs: f64| h.buckets.iter().find(|(b, _)| (*b - secs).abs() < 1e-15).map(|b| b.1);
    assert_eq!(at(16384e-9), Some(5));
    assert_eq!(at(65536e-9), Some(1));
    assert_eq!(
        h.buckets.iter().filter(|b| b.0.is_finite()).map(|b| b.1).sum::<u64>(),
        6,
        "the clamped slot is in +Inf only"
    );
    assert_eq!(h.buckets.last(), Some(&(f64::INFINITY, 1)));
    assert_eq!(h.count, 7);
    let text = render(
        &Snapshot {
            op_latency: vec![("op".into(), slots)],
            ..Default::default()
        },
        Format::Text,
    );
    assert!(
        text.contains("gdrtrace_operation_duration_seconds_bucket{node=\"\",op=\"op\",le=\"1.6384e-05\"} 5"),
        "{text}"
    );
    assert!(text.contains("le=\"+Inf\"} 7"), "{text}");
}

#[test]
fn every_histogram_ends_with_one_inf_bucket_in_both_formats() {
    let s = Snapshot::example();
    for format in [Format::OpenMetrics, Format::Text] {
        let text = render(&s, format);
        for name in ["operation_duration_seconds", "registration_duration_seconds"] {
            let counts: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with(&format!("gdrtrace_{name}_count")))
                .collect();
            let inf: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with(&format!("gdrtrace_{name}_bucket")) && l.contains("le=\"+Inf\""))
                .collect();
            assert!(!counts.is_empty(), "{format:?}: no {name}\n{text}");
            assert_eq!(
                counts.len(),
                inf.len(),
                "{format:?}: one +Inf bucket per {name}\n{text}"
            );
            for (c, i) in counts.iter().zip(&inf) {
                assert_eq!(
                    c.rsplit(' ').next(),
                    i.rsplit(' ').next(),
                    "{format:?}: +Inf equals _count"
                );
            }
        }
    }
}

#[test]
fn hdr_histograms_bin_like_the_slots() {
    let mut h = crate::stats::new_histogram();
    h.record(5_000).unwrap();
    h.record(5_000).unwrap();
    h.record(70_000).unwrap();
    let x = Hist::from_hdr(&h);
    assert_eq!(x.count, 3);
    assert_eq!(x.buckets.iter().map(|b| b.1).sum::<u64>(), 3);
    assert_eq!(
        x.buckets.iter().find(|b| b.0 > 1.6e-5 && b.0 < 1.7e-5).map(|b| b.1),
        Some(2)
    );
}

#[test]
fn a_process_without_communicators_has_one_verdict_series() {
    let mut s = snapshot();
    s.processes[0].communicators.clear();
    s.processes[0].comm_verdicts.clear();
    let text = render(&s, Format::Text);
    assert_eq!(text.matches("gdrtrace_transport_verdict_info{").count(), 1);
    assert!(text.contains("communicator=\"\",rank=\"\",nranks=\"\"} 1"), "{text}");
}

#[test]
fn exported_series_counts_every_sample_of_the_exposition() {
    for format in [Format::Text, Format::OpenMetrics] {
        let text = render(&Snapshot::example(), format);
        let samples = text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).count();
        let line = text
            .lines()
            .find(|l| l.starts_with("gdrtrace_exported_series{"))
            .expect("the gauge");
        let v: usize = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert_eq!(v, samples, "{format:?}\n{text}");
    }
}

#[test]
fn a_pod_sums_its_processes_and_only_active_ones_have_series() {
    let mut a = snapshot().processes.remove(0);
    a.pid = 7;
    let mut b = a.clone();
    b.pid = 8;
    b.registrations = vec![("io_uring", 1, 0), ("host", 2, 2)];
    b.estimates_lower_bound = true;
    let mut pod = ProcessFigures {
        collective_sampled_ratio: 1.0,
        ..Default::default()
    };
    pod.absorb(&a);
    pod.absorb(&b);
    assert_eq!(pod.processes, 2);
    assert_eq!(pod.moved_bytes, a.moved_bytes * 2);
    assert_eq!(pod.registrations, vec![("io_uring", 4, 2), ("host", 2, 2)]);
    assert_eq!(pod.communicators.len(), 1, "one communicator, one rank: summed");
    assert_eq!(pod.communicators[0].calls, 20);
    assert_eq!(pod.comm_verdicts.len(), 1, "the same verdict row once");
    pod.pod = a.pod.clone();
    let text = render(
        &Snapshot {
            processes: vec![pod],
            ..Default::default()
        },
        Format::Text,
    );
    assert!(
        text.contains("gdrtrace_processes{node=\"\",namespace=\"team-a\",pod=\"trainer-0\",container=\"worker\"} 2")
            && text.contains(
                "gdrtrace_process_info{node=\"\",namespace=\"team-a\",pod=\"trainer-0\",container=\"worker\"} 1"
            ),
        "{text}"
    );
    assert!(!text.contains("pid=\""), "no pid label at pod level:\n{text}");
    assert!(
        text.contains(
            "gdrtrace_estimates_lower_bound{node=\"\",namespace=\"team-a\",pod=\"trainer-0\",container=\"worker\"} 1"
        ),
        "one process's lower bound makes the pod's sum one:\n{text}"
    );
    let idle = ProcessFigures {
        pid: 9,
        comm: "ld-linux-x86-64".into(),
        calls_by_transport: vec![("unknown", 3)],
        ..Default::default()
    };
    assert!(!idle.active(), "set-up calls alone move nothing");
    assert!(a.active());
}

#[test]
fn format_follows_the_accept_header() {
    let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
    assert_eq!(Format::negotiate(Some("*/*")), Format::Text);
    assert_eq!(Format::negotiate(None), Format::Text);
}
