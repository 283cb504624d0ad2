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
