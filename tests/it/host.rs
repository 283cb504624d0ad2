//! Real BPF on this host: uprobes on functions of this test binary, the
//! syscall and sched tracepoints, the ring buffer round trip, and drop
//! counting under a deliberately tiny ring buffer.
use std::{hint::black_box, time::Duration};

use gdrtrace::{
    loader::LoadOptions,
    model::Backing,
    probes::{symbols, uapi},
    session::{Session, SessionOptions},
    trace::Trace,
};
use integration_tests::{can_trace, run, stdout};

/// Stand-in for libcuda's `cuMemAlloc_v2` (same name and signature; no GPU):
/// `CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)`.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn cuMemAlloc_v2(dptr: *mut u64, bytesize: usize) -> u32 {
    // SAFETY: callers pass a valid out-pointer.
    unsafe { *dptr = 0x7f00_dead_0000 + bytesize as u64 };
    black_box(0)
}

/// A plain target for the drop-counting test.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn gdrtrace_test_hot(x: u64) -> u64 {
    black_box(x ^ 0x55)
}

fn session(ringbuf_bytes: u32) -> Session {
    let opts = SessionOptions {
        load: LoadOptions {
            ringbuf_bytes,
            targets_only: true,
            ..LoadOptions::default()
        },
        families: None,
        installed_libraries: false,
        collectives: gdrtrace::sampling::Mode::Exact,
    };
    let mut s = Session::open(&opts).expect("opening a session");
    s.add_target(std::process::id()).expect("adding self to the target set");
    s
}

fn attach(s: &mut Session, symbol: &str, row_symbol: &str) -> Vec<String> {
    let exe = std::env::current_exe().expect("the test binary's path");
    let syms = symbols::functions(&exe).expect("the test binary's symbols");
    let (i, _) = uapi::TABLE
        .iter()
        .enumerate()
        .find(|(_, r)| r.symbol == row_symbol)
        .expect("a row of the table");
    let Session { ebpf, planner, .. } = s;
    let base = symbol.trim_end_matches("_v2");
    planner
        .attach_symbol(ebpf, &exe, &syms, base, uapi::op_of(i))
        .expect("attaching the uprobe pair")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

#[test]
fn uprobe_cookie_args_out_pointer_and_registry() {
    if !can_trace("uprobe_cookie_args_out_pointer_and_registry") {
        return;
    }
    let mut s = session(1 << 20);
    let attached = attach(&mut s, "cuMemAlloc_v2", "cuMemAlloc");
    assert_eq!(attached, vec!["cuMemAlloc_v2".to_string()]);
    let mut trace = Trace::new(s);
    trace.agg.add_process(std::process::id(), None);
    runtime()
        .block_on(trace.run_until(async {
            for size in [4096usize, 1 << 20, 3 << 20] {
                let mut p = 0u64;
                assert_eq!(cuMemAlloc_v2(&mut p, size), 0);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }))
        .unwrap();
    let report = trace.report(vec![], None).unwrap();
    let op = report
        .operations
        .iter()
        .find(|o| o.name == "cuMemAlloc")
        .expect("cuMemAlloc events");
    assert_eq!(op.calls, 3);
    assert_eq!(op.errors, 0);
    assert_eq!(op.bytes, 4096 + (1 << 20) + (3 << 20));
    assert!(op.latency.count == 3 && op.latency.max > 0);
    // The out-pointer was dereferenced at return: the registry knows the
    // "allocations" and classifies addresses inside them as GPU memory.
    let pid = std::process::id();
    let reg = &trace.agg.registry();
    assert!(matches!(
        reg.backing(pid, 0x7f00_dead_0000 + 4096 + 100),
        Backing::Gpu { .. }
    ));
    assert!(matches!(
        reg.backing(pid, 0x7f00_dead_0000 + (1 << 20) + (1 << 20) - 1),
        Backing::Gpu { .. }
    ));
    assert_eq!(
        reg.backing(pid, 0x7f00_dead_0000 + (1 << 20) + (1 << 20)),
        Backing::Unknown
    );
    assert!(report.loss.complete, "{:?}", report.loss);
}

#[test]
fn tiny_ring_buffer_drops_are_counted_exactly() {
    if !can_trace("tiny_ring_buffer_drops_are_counted_exactly") {
        return;
    }
    const CALLS: u64 = 2000;
    let page = gdrtrace::loader::page_size() as u32;
    let mut s = session(page);
    // Use a table op that is evented (not aggregate-only) with one Int arg.
    attach(&mut s, "gdrtrace_test_hot", "cuMemFreeHost");
    let mut trace = Trace::new(s);
    runtime()
        .block_on(trace.run_until(async {
            // No await between calls: the ring buffer is not drained meanwhile.
            for i in 0..CALLS {
                gdrtrace_test_hot(i);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }))
        .unwrap();
    let report = trace.report(vec![], None).unwrap();
    let delivered = report
        .operations
        .iter()
        .filter(|o| o.name == "cuMemFreeHost")
        .map(|o| o.calls)
        .sum::<u64>();
    let kernel_calls: u64 = report
        .kernel_histograms
        .iter()
        .filter(|h| h.name == "cuMemFreeHost")
        .map(|h| h.calls)
        .sum();
    assert!(
        report.loss.ringbuf_drops > 0,
        "a one-page ring buffer should overflow: {:?}",
        report.loss
    );
    assert_eq!(
        delivered + report.loss.ringbuf_drops,
        CALLS,
        "every call is delivered or counted as dropped"
    );
    assert_eq!(kernel_calls, CALLS, "in-kernel histogram sees every call");
    assert!(!report.loss.complete);
    assert!(report.operations.iter().all(|o| o.incomplete));
}

#[test]
fn sched_tracepoints_follow_children() {
    if !can_trace("sched_tracepoints_follow_children") {
        return;
    }
    let dir = integration_tests::scratch("test");
    let json = dir.join("report.json");
    // A shell (target) forks a child that does the registrations.
    let bin = integration_tests::gdrtrace_path();
    let script = format!(
        "{} drive pin-churn --iterations 7 --odirect-mib 0 & wait",
        bin.display()
    );
    let o = run(&["run", "--json", json.to_str().unwrap(), "--", "sh", "-c", &script]);
    assert!(o.status.success(), "{}", integration_tests::stderr(&o));
    let out = stdout(&o);
    let r = integration_tests::read_report(&json);
    let child_pid: u32 = out
        .split("pid=")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let child = r
        .processes
        .iter()
        .find(|p| p.pid == child_pid)
        .expect("the forked child is traced");
    assert_eq!(child.calls.get("io_uring_register:register-buffers"), Some(&7));
    assert!(child.parent.is_some(), "fork recorded the parent");
    let _ = std::fs::remove_dir_all(&dir);
}
