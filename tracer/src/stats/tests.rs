//! Naming processes: per-call records carry no command name (the kernel
//! side leaves it out to save a helper call per event), so a process is
//! named by procfs, an `EXEC` record, or, once gone, its `EXIT` record.
use tracer_common::{Event, kind, op};

use super::{Aggregator, source::Recorded};

fn record(kind: u32, pid: u32, comm: &str) -> Event {
    let mut e = Event {
        kind,
        op: op::IO_URING_REGISTER,
        pid,
        tid: pid,
        ..Event::default()
    };
    e.comm[..comm.len()].copy_from_slice(comm.as_bytes());
    e
}

/// A source with nothing to say: procfs had no entry by the time it was
/// asked (the process had already exited).
fn gone() -> Aggregator {
    Aggregator::with_source(Box::new(Recorded::default()))
}

#[test]
fn a_process_gone_before_procfs_named_it_is_named_by_its_exit_record() {
    let mut agg = gone();
    agg.push(&record(kind::CALL, 4242, ""));
    assert_eq!(agg.procs[&4242].comm, "", "a call record names nobody");
    agg.push(&record(kind::EXIT, 4242, "shortlived"));
    assert_eq!(agg.procs[&4242].comm, "shortlived");
    assert!(agg.procs[&4242].exited);
}

#[test]
fn an_exit_record_does_not_rename_a_named_process() {
    let mut agg = gone();
    agg.push(&record(kind::EXEC, 4243, "trainer"));
    agg.push(&record(kind::CALL, 4243, ""));
    agg.push(&record(kind::EXIT, 4243, "other"));
    assert_eq!(agg.procs[&4243].comm, "trainer");
}

/// The id hashes against values printed by NCCL's own code: `getHash` of
/// `src/include/bitops.h` (v2.28.9) and of `src/misc/utils.cc` (v2.21.5),
/// copied verbatim into a C++ file and run on three ids (bytes 0..127,
/// 128 x 0x5a, bytes 255 down to 128, which also checks that bytes from
/// 0x80 are sign-extended as `char` is on x86-64).
#[test]
fn unique_id_hashes_are_nccls() {
    use tracer_common::nccl_id::{WORDS, hash, hash_legacy};
    let words = |f: &dyn Fn(usize) -> u8| -> [u64; WORDS] {
        let mut w = [0u64; WORDS];
        for (i, word) in w.iter_mut().enumerate() {
            *word = u64::from_le_bytes(std::array::from_fn(|k| f(i * 8 + k)));
        }
        w
    };
    for (id, modern, legacy) in [
        (words(&|i| i as u8), 0x6afe1cc17717e1f4u64, 0xbf47c767cbdf3105u64),
        (words(&|_| 0x5a), 0x3e97385d3fdaa372, 0xfbf2f21fa2143505),
        (words(&|i| (255 - i) as u8), 0xf8a0d5283e693fb2, 0x0ef65392009eb905),
    ] {
        assert_eq!(hash(&id), modern, "NCCL 2.26+ getHash");
        assert_eq!(hash_legacy(&id), legacy, "NCCL up to 2.25 getHash");
    }
    assert_eq!(super::Communicator::hex(0x0ef65392009eb905), "0x0ef65392009eb905");
}

/// A successful init call names its communicator: handle, rank, nranks and
/// the id's hash; a failed one and one without a readable id do not claim one.
#[test]
fn an_init_call_names_its_communicator() {
    use tracer_common::nccl_id::{HASH_ARG, LEGACY_HASH_ARG};
    let (op, _) = crate::probes::uapi::TABLE
        .iter()
        .enumerate()
        .find(|(_, r)| r.name == "ncclCommInitRank")
        .map(|(i, r)| (crate::probes::uapi::op_of(i), r))
        .expect("ncclCommInitRank row");
    let mut agg = gone();
    let mut e = record(kind::CALL, 4300, "");
    e.op = op;
    e.args = [0x55d9dbb07aa0, 2, 1, 0, 0, 0];
    e.args[HASH_ARG] = 0x6afe1cc17717e1f4;
    e.args[LEGACY_HASH_ARG] = 0xbf47c767cbdf3105;
    agg.push(&e);
    let mut unread = e;
    unread.args[HASH_ARG] = 0;
    unread.args[LEGACY_HASH_ARG] = 0;
    unread.args[0] = 0x1000;
    agg.push(&unread);
    let mut failed = e;
    failed.ret = 5;
    agg.push(&failed);
    let comms = &agg.procs[&4300].communicators;
    assert_eq!(comms.len(), 2, "the failed call made no communicator: {comms:?}");
    assert_eq!(comms[0].communicator, "0x55d9dbb07aa0");
    assert_eq!(comms[0].comm_id.as_deref(), Some("0x6afe1cc17717e1f4"));
    assert_eq!(comms[0].comm_id_legacy.as_deref(), Some("0xbf47c767cbdf3105"));
    assert_eq!((comms[0].rank, comms[0].nranks), (Some(1), Some(2)));
    assert_eq!(comms[1].comm_id, None, "an unreadable id is not claimed");
}

/// `cuMemcpyPeer*` with both contexts on one device crosses no link: its
/// own label, not NVLink and not staged (issue 23).
#[test]
fn a_peer_copy_on_one_device_is_same_device_ipc() {
    use crate::classify::Transport;
    let op = |name: &str| {
        crate::probes::uapi::TABLE
            .iter()
            .position(|r| r.name == name)
            .map(crate::probes::uapi::op_of)
            .unwrap_or_else(|| panic!("no {name} row"))
    };
    let mut agg = gone();
    // Two contexts, both on device 0 (args[0]: the context, dereferenced).
    for ctx in [0xc0, 0xc1] {
        let mut e = record(kind::CALL, 4400, "");
        e.op = op("cuDevicePrimaryCtxRetain");
        e.args = [ctx, 0, 0, 0, 0, 0];
        agg.push(&e);
    }
    // CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n);
    for (dctx, sctx) in [(0xc0, 0xc1), (0xc0, 0xc0)] {
        let mut e = record(kind::CALL, 4400, "");
        e.op = op("cuMemcpyPeer");
        e.args = [0x7000_0000, dctx, 0x7100_0000, sctx, 1 << 20, 0];
        agg.push(&e);
    }
    let peer: Vec<_> = agg
        .ops
        .keys()
        .filter(|k| k.op == "cuMemcpyPeer")
        .map(|k| k.transport)
        .collect();
    assert_eq!(
        peer,
        [Transport::IpcSameDevice],
        "{:?}",
        agg.ops.keys().collect::<Vec<_>>()
    );
    assert_eq!(
        agg.ops[&super::OpKey::new("cuMemcpyPeer", Transport::IpcSameDevice)].calls,
        2
    );
    assert!(!Transport::IpcSameDevice.staged());
}
