use tracer_common::{Event, kind};

use super::*;
use crate::probes::uapi::{TABLE, op_of};

fn call(symbol: &str, args: [u64; 6], ret: i64, start_ns: u64) -> Event {
    let i = TABLE
        .iter()
        .position(|r| r.symbol == symbol)
        .expect("a row of the table");
    Event {
        kind: kind::CALL,
        op: op_of(i),
        pid: 7,
        tid: 7,
        start_ns,
        dur_ns: 1_000,
        args,
        ret,
        ..Default::default()
    }
}

const MR: i64 = 0x5000;
const PD: u64 = 0x6000;
const IBV_REREG_MR_CHANGE_TRANSLATION: u64 = 1;
const EINVAL: i64 = 22;

/// `ibv_rereg_mr(mr, flags, pd, addr, length, access)` returns 0 on
/// success and reads its range from arguments 3 and 4: a success moves
/// the MR (one registration, the new range pinned, the old one not), a
/// failure is logged with the range it asked for. The rule before
/// (success when ret != 0, range from arguments 1 and 2) logged every
/// success as a failure at (flags, pd).
#[test]
fn rereg_mr_success_and_failure_are_counted() {
    let mut reg = Registry::default();
    // struct ibv_mr *ibv_reg_mr(pd, addr, length, access); lkey 0x11, rkey 0x22.
    reg.observe(&call(
        "ibv_reg_mr",
        [PD, 0x10_0000, 4096, 7, 0, 0x22 << 32 | 0x11],
        MR,
        1,
    ));
    let flags = IBV_REREG_MR_CHANGE_TRANSLATION;
    reg.observe(&call("ibv_rereg_mr", [MR as u64, flags, PD, 0x20_0000, 8192, 7], 0, 2));
    let p = &reg.procs[&7];
    assert_eq!(p.churn.registrations, 2, "the registration and the re-registration");
    assert!(
        p.failed.is_empty(),
        "a successful re-registration is no failure: {:?}",
        p.failed
    );
    let mr = &p.mrs[&(MR as u64)];
    assert_eq!((mr.addr, mr.len, mr.lkey, mr.rkey), (0x20_0000, 8192, 0x11, 0x22));
    assert_eq!(p.churn.pinned_bytes, 8192, "the old range is no longer pinned");
    assert_eq!(
        p.churn.mr_log.last().map(|m| (m.addr, m.length)),
        Some((0x20_0000, 8192))
    );

    // Only the access changes: the MR keeps its range whatever the
    // (unused) address arguments hold.
    reg.observe(&call("ibv_rereg_mr", [MR as u64, 4, PD, 0, 0, 1], 0, 3));
    let p = &reg.procs[&7];
    assert_eq!(p.churn.registrations, 3);
    assert_eq!(p.mrs[&(MR as u64)].addr, 0x20_0000);

    reg.observe(&call(
        "ibv_rereg_mr",
        [MR as u64, flags, PD, 0x30_0000, 64, 7],
        EINVAL,
        4,
    ));
    let p = &reg.procs[&7];
    assert_eq!(p.churn.registrations, 3, "a failure is not a registration");
    assert_eq!(p.failed.len(), 1);
    assert_eq!(
        (p.failed[0].op.as_str(), p.failed[0].addr, p.failed[0].length),
        ("ibv_rereg_mr", 0x30_0000, 64)
    );
    assert_eq!(
        p.mrs[&(MR as u64)].addr,
        0x20_0000,
        "a failed re-registration leaves the MR"
    );
}

/// The classifier asks the same row: a re-registration that returned 0
/// is not a failed call, one that returned an error is.
#[test]
fn rereg_mr_classified_by_the_same_rule() {
    let mut reg = Registry::default();
    let ok = call(
        "ibv_rereg_mr",
        [MR as u64, IBV_REREG_MR_CHANGE_TRANSLATION, PD, 0x20_0000, 8192, 7],
        0,
        2,
    );
    reg.observe(&ok);
    assert!(!crate::classify::call(&ok, &reg).expect("decoded").failed);
    let bad = call("ibv_rereg_mr", [MR as u64, 1, PD, 0x20_0000, 8192, 7], EINVAL, 3);
    assert!(crate::classify::call(&bad, &reg).expect("decoded").failed);
    // Pointer-returning rows fail with NULL.
    let null = call("ibv_reg_mr", [PD, 0x10_0000, 4096, 7, 0, 0], 0, 4);
    assert!(crate::classify::call(&null, &reg).expect("decoded").failed);
}
