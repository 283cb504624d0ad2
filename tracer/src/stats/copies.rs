//! Copies counted in the kernel (`op_flags::COPY_ROWS`): each (process,
//! op, address pair, region epoch) is one row of `AGGREGATE`, whose first
//! call arrives as an event (`kind::ROW_FIRST`, classified like any call
//! at its place in the stream) and whose other calls arrive as the row's
//! totals every tick. A row's later calls share its first call's verdict:
//! anything that could change what backs its addresses (an allocation, a
//! free, a registration) starts a new epoch in the kernel, hence a new row
//! with a new first call, classified after that change.
//!
//! Rows are summed per (process, copy, verdict), a *class*: the duty
//! cycle's estimates (`sampling/estimator.rs`) are made per class, since rows come
//! and go with epochs and addresses while a class's rate holds. What the
//! aggregator adds for a class is its estimated calls and bytes less those
//! of its evented first calls.
use std::collections::BTreeMap;

use tracer_common::Event;

use crate::classify::{Call, Transport};
use crate::sampling::RowKey;

/// A kernel row: (pid, op, handle).
pub type KernelRow = (u32, u32, u64);

/// A class of copies: their first call and verdict, and what was added.
#[derive(Clone, Debug)]
pub struct Class {
    /// One first call of the class, as a `CALL` record (`ret` 0).
    pub first: Event,
    pub call: Call,
    /// First calls evented (each counted as a call already).
    pub firsts: u64,
    pub first_bytes: u64,
    /// Calls and bytes beyond the first ones added to the figures so far.
    pub applied: (u64, u64),
}

/// The copy rows and classes of every process.
#[derive(Clone, Debug, Default)]
pub struct CopyRows {
    /// Each kernel row's class, once its first call arrived.
    rows: BTreeMap<KernelRow, RowKey>,
    pub classes: BTreeMap<RowKey, Class>,
    /// The kernel's totals per row (cumulative), as counted.
    kernel: BTreeMap<KernelRow, (u64, u64)>,
    /// The final totals of the rows the kernel's table no longer holds
    /// (reclaimed: `Session::reclaim_copy_rows`), per class.
    retired: BTreeMap<RowKey, (u64, u64)>,
}

/// The class key of a call: (pid, label, verdict).
fn class_of(pid: u32, call: &Call) -> RowKey {
    (
        pid,
        call.label.clone(),
        Transport::ALL
            .iter()
            .position(|t| *t == call.transport)
            .unwrap_or(usize::MAX) as u64,
    )
}

impl CopyRows {
    /// A row's first call, classified as `call`; returns its class.
    pub fn first(&mut self, pid: u32, op: u32, handle: u64, first: Event, call: &Call) -> RowKey {
        let key = class_of(pid, call);
        self.rows.insert((pid, op, handle), key.clone());
        let c = self.classes.entry(key.clone()).or_insert_with(|| Class {
            first,
            call: call.clone(),
            firsts: 0,
            first_bytes: 0,
            applied: (0, 0),
        });
        c.firsts += 1;
        c.first_bytes += call.bytes;
        key
    }

    /// The kernel's totals of every copy row (cumulative). A row no
    /// longer there was reclaimed once no call could reach it: its last
    /// totals were final, and its class keeps them.
    pub fn set_kernel(&mut self, rows: BTreeMap<KernelRow, (u64, u64)>) {
        for (row, (c, b)) in std::mem::replace(&mut self.kernel, rows) {
            if self.kernel.contains_key(&row) {
                continue;
            }
            if let Some(k) = self.rows.remove(&row) {
                let r = self.retired.entry(k).or_default();
                r.0 += c;
                r.1 += b;
            }
        }
    }

    /// Calls and bytes per class as the kernel counted them (rows whose
    /// first call has not arrived yet wait for it).
    pub fn counted(&self) -> BTreeMap<RowKey, (u64, u64)> {
        let mut out = self.retired.clone();
        for (row, (c, b)) in &self.kernel {
            if let Some(k) = self.rows.get(row) {
                let e = out.entry(k.clone()).or_default();
                e.0 += c;
                e.1 += b;
            }
        }
        out
    }

    /// What is still to add (or take back, where an estimate came down)
    /// for each class: (key, calls, bytes); marks it done.
    pub fn due(&mut self, estimate: impl Fn(&RowKey, (u64, u64)) -> (u64, u64)) -> Vec<(RowKey, i64, i64)> {
        let mut out = Vec::new();
        for (k, counted) in self.counted() {
            let Some(c) = self.classes.get_mut(&k) else { continue };
            let (calls, bytes) = estimate(&k, counted);
            let extra = (calls.saturating_sub(c.firsts), bytes.saturating_sub(c.first_bytes));
            if extra != c.applied {
                out.push((
                    k,
                    extra.0 as i64 - c.applied.0 as i64,
                    extra.1 as i64 - c.applied.1 as i64,
                ));
                c.applied = extra;
            }
        }
        out
    }

    /// Calls of (label, verdict) the kernel counted, where the figures
    /// hold more (the duty cycle's estimates): None when they are counted.
    pub fn counted_calls(&self, label: &str, transport: Transport) -> Option<u64> {
        let counted = self.counted();
        let (mut total, mut kernel) = (0, 0);
        for (k, c) in self.classes_of(label, transport) {
            total += c.firsts + c.applied.0;
            kernel += counted.get(k).map_or(c.firsts, |v| v.0);
        }
        (total > kernel).then_some(kernel)
    }

    /// The classes of (label, verdict).
    pub fn classes_of(&self, label: &str, transport: Transport) -> impl Iterator<Item = (&RowKey, &Class)> {
        self.classes
            .iter()
            .filter(move |(k, c)| k.1 == label && c.call.transport == transport)
    }

    pub fn forget(&mut self, pid: u32) {
        self.rows.retain(|(p, _, _), _| *p != pid);
        self.kernel.retain(|(p, _, _), _| *p != pid);
        self.classes.retain(|(p, _, _), _| *p != pid);
        self.retired.retain(|(p, _, _), _| *p != pid);
    }
}

#[cfg(test)]
mod tests {
    use tracer_common::{AggKey, AggValue, Event, kind};

    use crate::{
        probes::ops::op_code,
        stats::{Aggregator, source::Recorded},
    };

    const P: u32 = 300;
    const DEV: u64 = 0x7f00_0000_0000;
    const PINNED: u64 = 0x7f10_0000_0000;
    const PAGEABLE: u64 = 0x55d0_0000_1000;
    const N: u64 = 8192;

    fn event(kind: u32, name: &str, args: &[u64], ret: i64, t: u64) -> Event {
        let mut e = Event {
            kind,
            op: op_code(name).unwrap(),
            pid: P,
            tid: P,
            start_ns: t,
            dur_ns: 5_000,
            ret,
            ..Default::default()
        };
        e.args[..args.len()].copy_from_slice(args);
        e
    }

    /// A process with a device buffer and a pinned one.
    fn job() -> Aggregator {
        let mut a = Aggregator::with_source(Box::new(Recorded::default()));
        a.add_process(P, None);
        a.push(&event(kind::CALL, "cuMemAlloc", &[DEV, 1 << 20], 0, 1_000));
        a.push(&event(kind::CALL, "cuMemHostAlloc", &[PINNED, 1 << 20, 0], 0, 2_000));
        a
    }

    /// (dst, src) of each copy of the mixed loop: H2D and D2H, from pinned
    /// and pageable memory.
    const COPIES: [(&str, u64, u64, u64); 4] = [
        ("cuMemcpyHtoDAsync", DEV, PINNED, 1),
        ("cuMemcpyDtoHAsync", PINNED, DEV, 2),
        ("cuMemcpyHtoDAsync", DEV, PAGEABLE, 3),
        ("cuMemcpyDtoHAsync", PAGEABLE, DEV, 4),
    ];

    /// Per (op, verdict): calls and bytes; the process's moved, staged
    /// bytes and staging copies; its calls per op.
    type Figures = (Vec<(String, String, u64, u64)>, (u64, u64, u64), Vec<(String, u64)>);

    fn figures(a: &Aggregator) -> Figures {
        let ops = a
            .ops
            .iter()
            .filter(|(k, _)| k.op.starts_with("cuMemcpy"))
            .map(|(k, s)| (k.op.clone(), k.transport.name().to_string(), s.calls, s.bytes))
            .collect();
        let p = &a.procs[&P];
        let calls = p
            .calls
            .iter()
            .filter(|(l, _)| l.starts_with("cuMemcpy"))
            .map(|(l, n)| (l.clone(), *n))
            .collect();
        (ops, (p.moved_bytes, p.staged_bytes, p.staging_copies), calls)
    }

    /// Copies summed in the kernel add up, verdict by verdict, to what the
    /// same calls evented one by one add up to: pinned copies DMA, pageable
    /// ones host-staged, half the bytes of the mixed loop staged.
    #[test]
    fn copy_rows_add_up_to_their_calls_evented() {
        const CALLS: u64 = 1000;
        let mut evented = job();
        let mut t = 10_000;
        for _ in 0..CALLS {
            for (name, dst, src, _) in COPIES {
                evented.push(&event(kind::CALL, name, &[dst, src, N, 0], 0, t));
                t += 100;
            }
        }
        let mut rows = job();
        let mut kernel = Vec::new();
        for (name, dst, src, handle) in COPIES {
            rows.push(&event(kind::ROW_FIRST, name, &[dst, src, N, 0], handle as i64, 10_000));
            let key = AggKey {
                tgid: P,
                op: op_code(name).unwrap(),
                handle,
            };
            kernel.push((
                key,
                AggValue {
                    calls: CALLS,
                    bytes: CALLS * N,
                },
            ));
        }
        rows.set_aggregates(0, &kernel);
        rows.settle();
        evented.settle();
        assert_eq!(figures(&rows), figures(&evented));
        let (ops, (moved, staged, staging), _) = figures(&rows);
        assert_eq!(moved, 4 * CALLS * N);
        assert_eq!(staged * 2, moved, "mixed: 50.0% staged");
        assert_eq!(staging, 2 * CALLS);
        assert!(
            ops.iter()
                .any(|(l, t, c, _)| l == "cuMemcpyHtoDAsync" && t == "gpu-host-dma" && *c == CALLS)
        );
        assert!(
            ops.iter()
                .any(|(l, t, c, _)| l == "cuMemcpyDtoHAsync" && t == "host-staged" && *c == CALLS)
        );
        // One transfer record per row for the calls beyond its first.
        let g = &rows.transfers.groups;
        let n: u64 = g
            .iter()
            .filter(|(k, _)| k.op.starts_with("cuMemcpy"))
            .map(|(_, v)| v.count)
            .sum();
        assert_eq!(n, 4 * CALLS);
        assert_eq!(rows.copies.classes.len(), 4, "(copy, verdict) classes");
    }

    /// A row's totals grow tick by tick: each tick adds only what is new,
    /// and a row whose first call has not arrived waits for it.
    #[test]
    fn ticks_add_only_what_is_new() {
        let mut a = job();
        let key = AggKey {
            tgid: P,
            op: op_code("cuMemcpyHtoDAsync").unwrap(),
            handle: 9,
        };
        a.set_aggregates(0, &[(key, AggValue { calls: 5, bytes: 5 * N })]);
        assert_eq!(a.calls_of(P, "cuMemcpyHtoDAsync"), 0, "no first call yet");
        a.push(&event(
            kind::ROW_FIRST,
            "cuMemcpyHtoDAsync",
            &[DEV, PAGEABLE, N, 0],
            9,
            10_000,
        ));
        a.set_aggregates(0, &[(key, AggValue { calls: 5, bytes: 5 * N })]);
        assert_eq!(a.calls_of(P, "cuMemcpyHtoDAsync"), 5);
        a.set_aggregates(
            0,
            &[(
                key,
                AggValue {
                    calls: 12,
                    bytes: 12 * N,
                },
            )],
        );
        a.set_aggregates(
            0,
            &[(
                key,
                AggValue {
                    calls: 12,
                    bytes: 12 * N,
                },
            )],
        );
        assert_eq!(a.calls_of(P, "cuMemcpyHtoDAsync"), 12);
        assert_eq!(a.procs[&P].staged_bytes, 12 * N);
    }

    /// A row the kernel's table no longer holds (reclaimed once no call can
    /// reach it) keeps its last totals in its class: the figures never go
    /// back, and a row of the same copy made anew adds to them.
    #[test]
    fn reclaimed_rows_keep_their_totals() {
        let mut a = job();
        let row = |handle: u64, calls: u64| {
            (
                AggKey {
                    tgid: P,
                    op: op_code("cuMemcpyHtoDAsync").unwrap(),
                    handle,
                },
                AggValue {
                    calls,
                    bytes: calls * N,
                },
            )
        };
        let first = |a: &mut Aggregator, handle: u64| {
            a.push(&event(
                kind::ROW_FIRST,
                "cuMemcpyHtoDAsync",
                &[DEV, PAGEABLE, N, 0],
                handle as i64,
                10_000,
            ))
        };
        first(&mut a, 9);
        a.set_aggregates(0, &[row(9, 40)]);
        assert_eq!(a.calls_of(P, "cuMemcpyHtoDAsync"), 40);
        // Reclaimed: gone from the table, its 40 copies stay.
        a.set_aggregates(0, &[]);
        assert_eq!(a.calls_of(P, "cuMemcpyHtoDAsync"), 40);
        // The same copy under a new tag: a new row, its first call evented.
        first(&mut a, 11);
        a.set_aggregates(0, &[row(11, 2)]);
        a.set_aggregates(0, &[row(11, 7)]);
        a.settle();
        assert_eq!(a.calls_of(P, "cuMemcpyHtoDAsync"), 47);
        assert_eq!(a.procs[&P].staged_bytes, 47 * N);
        assert_eq!(a.copies.classes.len(), 1, "one class");
        assert_eq!(a.copies.rows.len(), 1, "the reclaimed row is forgotten");
    }

    /// A copy loop whose probes closed makes its copies up to its exit: the
    /// off phase it exited in is estimated, and its copies say so. Before,
    /// its exit took it out of that interval, and its copies were reported
    /// as counted, every one (`bench copies`: 4% of them, unmarked).
    #[test]
    fn the_off_phase_a_process_exits_in_is_estimated() {
        let mut a = job();
        let key = AggKey {
            tgid: P,
            op: op_code("cuMemcpyHtoDAsync").unwrap(),
            handle: 9,
        };
        a.push(&event(
            kind::ROW_FIRST,
            "cuMemcpyHtoDAsync",
            &[DEV, PAGEABLE, N, 0],
            9,
            10_000,
        ));
        let totals = |calls: u64| {
            [(
                key,
                AggValue {
                    calls,
                    bytes: calls * N,
                },
            )]
        };
        // Two ticks counting 25,000 copies each; then the process exits in a
        // tick whose on phase ends after 150 ms, 100 ms before its end (its
        // rest, after its totals), and a tick later the trace ends.
        for calls in [25_000, 50_000] {
            a.duty(250_000, 0, &[]);
            a.set_aggregates(0, &totals(calls));
        }
        let exit = Event {
            kind: kind::EXIT,
            pid: P,
            tid: P,
            ..Default::default()
        };
        a.push(&exit);
        a.duty(150_000, 0, &[]);
        a.set_aggregates(0, &totals(65_000));
        a.duty_rest(100_000);
        a.duty(0, 250_000, &[]);
        a.set_aggregates(0, &totals(65_000));
        a.settle();
        let p = &a.procs[&P];
        assert_eq!(p.collectives_sampled.traced_us, 750_000, "not the tick after its exit");
        assert_eq!(p.collectives_sampled.sampled_us, 650_000);
        let calls = a.calls_of(P, "cuMemcpyHtoDAsync");
        // 100 ms at the 100 a millisecond counted before it.
        assert!((73_000..=77_000).contains(&calls), "{calls}");
        let t = a.ops().keys().find(|k| k.op == "cuMemcpyHtoDAsync").unwrap().transport;
        assert_eq!(a.copies().counted_calls("cuMemcpyHtoDAsync", t), Some(65_000));
    }
}
