use std::path::Path;

use super::{parent::rank_args, *};

#[test]
fn emulated_hosts_placement() {
    // Two emulated nodes on one GPU: both ranks on GPU 0, one per host.
    let p = Placement::new(None, 2, 1).unwrap();
    assert_eq!(p.nranks, 2);
    assert_eq!(p.of(0), (Some("gdrtrace-emu-0".into()), 0));
    assert_eq!(p.of(1), (Some("gdrtrace-emu-1".into()), 0));
    // 2 nodes x 2 GPUs: ranks 0,1 on host 0 (GPUs 0,1), ranks 2,3 on host 1.
    let p = Placement::new(None, 2, 2).unwrap();
    let placed: Vec<_> = (0..4).map(|r| p.of(r)).collect();
    assert_eq!(
        placed,
        vec![
            (Some("gdrtrace-emu-0".into()), 0),
            (Some("gdrtrace-emu-0".into()), 1),
            (Some("gdrtrace-emu-1".into()), 0),
            (Some("gdrtrace-emu-1".into()), 1)
        ]
    );
    // One host: no NCCL_HOSTID, one rank per GPU as before.
    let p = Placement::new(None, 1, 2).unwrap();
    assert_eq!((p.nranks, p.of(1)), (2, (None, 1)));
    for (nranks, hosts, gpus, why) in [
        (Some(3), 1, 2, "only 2 GPU(s)"),
        (Some(3), 2, 2, "not a multiple"),
        (Some(4), 2, 1, "NCCL refuses two ranks of one host on one GPU"),
        (None, 0, 1, "at least 1"),
    ] {
        let e = Placement::new(nranks, hosts, gpus).unwrap_err().to_string();
        assert!(e.contains(why), "{nranks:?} {hosts} {gpus}: {e}");
    }
}

#[test]
fn busbw_factors_match_nccl_tests() {
    assert_eq!(bus_factor(NcclOp::AllReduce, 1), 0.0);
    assert_eq!(bus_factor(NcclOp::AllReduce, 2), 1.0);
    assert_eq!(bus_factor(NcclOp::AllReduce, 4), 1.5);
    assert_eq!(bus_factor(NcclOp::AllReduce, 8), 1.75);
    assert_eq!(bus_factor(NcclOp::AllGather, 2), 0.5);
    assert_eq!(bus_factor(NcclOp::AllGather, 8), 0.875);
    assert_eq!(bus_factor(NcclOp::AllGather, 0), 0.0);
}

#[test]
fn element_counts() {
    assert_eq!(counts(NcclOp::AllReduce, 8192, 2), (2048, 2048, 8192));
    assert_eq!(counts(NcclOp::AllGather, 8192, 2), (1024, 2048, 8192));
    // Rounded down to whole float32s per rank.
    assert_eq!(counts(NcclOp::AllGather, 100, 3), (8, 24, 96));
    assert_eq!(counts(NcclOp::AllGather, 4, 8), (1, 8, 32));
    assert_eq!(counts(NcclOp::AllReduce, 2, 2), (1, 1, 4));
}

#[test]
fn id_hex_round_trips() {
    let mut id = [0 as std::ffi::c_char; 128];
    for (i, b) in id.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(37) as std::ffi::c_char;
    }
    let hex = id_to_hex(&id);
    assert_eq!(hex.len(), 256);
    assert_eq!(id_from_hex(&hex), Ok(id));
    assert!(id_from_hex("abc").is_err());
    assert!(id_from_hex(&"zz".repeat(128)).is_err());
}

#[test]
fn modes_always_disable_nvls() {
    for m in [NcclMode::Auto, NcclMode::NoP2p, NcclMode::NoP2pNoShm] {
        assert!(m.env().contains(&("NCCL_NVLS_ENABLE", "0")));
    }
    assert_eq!(NcclMode::Auto.env().len(), 1);
    assert!(NcclMode::NoP2p.env().contains(&("NCCL_P2P_DISABLE", "1")));
    assert!(!NcclMode::NoP2p.env().iter().any(|(k, _)| *k == "NCCL_SHM_DISABLE"));
    assert!(NcclMode::NoP2pNoShm.env().contains(&("NCCL_SHM_DISABLE", "1")));
}

#[test]
fn rank_args_carry_the_options() {
    let o = NcclOpts {
        op: NcclOp::AllGather,
        mode: NcclMode::NoP2p,
        iters: Some(7),
        duration: Some(Duration::from_millis(1500)),
        ..Default::default()
    };
    let a = rank_args(&o, 1, 2, "ab", Path::new("/tmp/r1.json")).join(" ");
    assert!(a.starts_with("drive nccl --rank 1 --nranks 2 --id ab --result /tmp/r1.json"));
    assert!(a.contains("--op all-gather --mode no-p2p --warmup 5"));
    assert!(a.contains("--sizes 8192,65536,1048576,16777216,268435456"));
    assert!(a.contains("--iters 7"));
    assert!(a.contains("--duration 1.5"));
}

#[test]
fn summary_first_line() {
    let r = NcclReport {
        ranks: 2,
        hosts: 1,
        mode: NcclMode::NoP2p,
        op: NcclOp::AllReduce,
        env: BTreeMap::new(),
        calls: 42,
        calls_by_function: BTreeMap::from([("ncclAllReduce".to_string(), 42)]),
        control_calls: 0,
        duration_s: None,
        duration_iters: 0,
        sizes: vec![],
        verified: true,
        nccl_version: "2.27.7".into(),
        nccl_library: "libnccl.so.2".into(),
        parent_pid: 1,
        rank_reports: vec![],
        elapsed_s: 0.0,
    };
    assert_eq!(r.summary_lines()[0], "nccl: ranks=2 mode=no-p2p op=all-reduce calls=42");
    // `validate` reads the summary back as this type.
    let back: NcclReport = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
    assert_eq!((back.ranks, back.calls, back.mode), (2, 42, NcclMode::NoP2p));
}
