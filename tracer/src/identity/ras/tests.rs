use super::*;

/// NCCL 2.28.9's answer to `CLIENT PROTOCOL 2`, `SET FORMAT json`,
/// `VERBOSE STATUS` in an emulated two-node torch job (two processes on one
/// H100, each with its own NCCL_HOSTID), as the client read it.
const GPU_ANSWER: &str = include_str!("../../../../tests/fixtures/logs/gpu-h100-nodes-ras-json.txt");

fn gpu_status() -> RasStatus {
    let json = GPU_ANSWER
        .strip_prefix("SERVER PROTOCOL 2\nOK\n")
        .expect("the transcript starts with the two short answers");
    parse(json).expect("NCCL's JSON parses")
}

fn local(pid: u32, communicator: &str, calls: &[(&str, u64)]) -> Local {
    Local {
        pid,
        ns_pid: pid,
        communicator: communicator.into(),
        calls: calls.iter().map(|(f, n)| (f.to_string(), *n)).collect(),
    }
}

#[test]
fn reads_nccls_own_status() {
    let s = gpu_status();
    assert_eq!(s.nccl_version, "2.28.9");
    assert_eq!(s.communicators.len(), 1);
    let c = &s.communicators[0];
    assert_eq!(c.hash, "0xa2bd4a35a81cd717", "the commId of NCCL's Init lines");
    assert_eq!(c.size, 2);
    assert_eq!(
        c.ranks.iter().map(|r| (r.rank, r.pid)).collect::<Vec<_>>(),
        [(0, 1630), (1, 1631)]
    );
    assert_eq!(c.ranks[0].collective_counts["AllReduce"], 473);
    assert_eq!(c.ranks[0].host, "192.0.2.2");
}

#[test]
fn a_pid_with_one_communicator_maps_directly() {
    let s = gpu_status();
    // The attach report of rank 0's process (pid 1630): one communicator,
    // its calls since the attach.
    let m = map(&s, &[local(1630, "0x458dd770", &[("AllReduce", 1336)])]);
    assert_eq!(
        m,
        [RasMatch {
            pid: 1630,
            communicator: "0x458dd770".into(),
            mapping: Mapping::Matched {
                comm_id: "0xa2bd4a35a81cd717".into(),
                rank: 0,
                nranks: 2
            }
        }]
    );
    let m = map(&s, &[local(4242, "0x1", &[("AllReduce", 1)])]);
    assert_eq!(m[0].mapping, Mapping::NotListed, "another job's pid");
}

#[test]
fn namespace_pids_are_matched_as_ras_lists_them() {
    let s = gpu_status();
    let mut l = local(90001, "0x458dd770", &[("AllReduce", 5)]);
    l.ns_pid = 1631;
    assert!(matches!(map(&s, &[l])[0].mapping, Mapping::Matched { rank: 1, .. }));
}

/// Two communicators of one process: told apart by the collectives each
/// made, else ambiguous.
#[test]
fn several_communicators_map_by_their_collectives_or_not_at_all() {
    let rank = |pid: i64, counts: &[(&str, u64)]| RasRank {
        rank: 0,
        host: "192.0.2.2".into(),
        pid,
        cuda_dev: Some(0),
        collective_counts: counts.iter().map(|(f, n)| (f.to_string(), *n)).collect(),
    };
    let comm = |hash: &str, counts: &[(&str, u64)]| RasComm {
        hash: hash.into(),
        size: 2,
        ranks: vec![rank(7, counts)],
        missing_ranks: Vec::new(),
    };
    let zeros = [("AllReduce", 0), ("AllGather", 0), ("Broadcast", 0)];
    let with = |f: &str, n: u64| -> Vec<(&str, u64)> {
        zeros.iter().map(|(g, z)| (*g, if *g == f { n } else { *z })).collect()
    };
    let s = RasStatus {
        nccl_version: "2.28.9".into(),
        communicators: vec![
            comm("0x000000000000000a", &with("AllReduce", 9)),
            comm("0x000000000000000b", &with("AllGather", 3)),
        ],
    };
    let m = map(
        &s,
        &[
            local(7, "0x10", &[("AllGather", 1)]),
            local(7, "0x20", &[("AllReduce", 4), ("Send", 2)]),
        ],
    );
    let ids: Vec<_> = m
        .iter()
        .map(|x| match &x.mapping {
            Mapping::Matched { comm_id, .. } => (x.communicator.as_str(), comm_id.as_str()),
            o => panic!("{o:?}"),
        })
        .collect();
    assert_eq!(ids, [("0x10", "0x000000000000000b"), ("0x20", "0x000000000000000a")]);

    // Both made all-reduces: nothing tells them apart.
    let s = RasStatus {
        communicators: vec![
            comm("0x000000000000000a", &with("AllReduce", 9)),
            comm("0x000000000000000b", &with("AllReduce", 3)),
        ],
        ..s
    };
    let m = map(
        &s,
        &[
            local(7, "0x10", &[("AllReduce", 1)]),
            local(7, "0x20", &[("AllReduce", 4)]),
        ],
    );
    assert!(
        m.iter()
            .all(|x| matches!(&x.mapping, Mapping::Ambiguous { candidates } if candidates.len() == 2)),
        "{m:?}"
    );
}

#[test]
fn answers_that_are_not_nccls_are_refused_in_one_line() {
    let e = parse(r#"{"communicators": [{"hash": "12", "size": 2}]}"#).unwrap_err();
    assert!(e.contains("not a communicator hash"), "{e}");
    assert!(!e.contains('\n'));
    let e = parse("NCCL version 2.27.3 compiled with CUDA 12.9").unwrap_err();
    assert!(e.contains("not the JSON NCCL writes"), "{e}");
}

#[test]
fn no_ras_is_an_answer_not_a_failure() {
    // A port nothing listens on (bound, then closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let q = query(&format!("127.0.0.1:{port}"));
    match q.answer {
        RasAnswer::Error(e) => assert!(e.contains("cannot connect") && !e.contains('\n'), "{e}"),
        RasAnswer::Status(s) => panic!("{s:?}"),
    }
    assert_eq!(function_of("ncclAllReduce"), "AllReduce");
}
