//! `gdrtrace validate`: run every workload this machine supports under the
//! tracer and hold the tracer to the workloads' own counts.
use std::path::PathBuf;

use super::run::Outputs;
use crate::{
    cli::{TraceArgs, ValidateArgs},
    drive::pin_churn::PinChurnSummary,
    error::{Error, Result},
    probes::{Family, Status},
    report::Report,
};

/// One check: what was compared, and whether it held.
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

fn check(name: &str, ok: bool, detail: String) -> Check {
    Check {
        name: name.to_string(),
        ok,
        detail,
    }
}

fn calls(r: &Report, pid: u32, label: &str) -> u64 {
    r.processes
        .iter()
        .find(|p| p.pid == pid)
        .and_then(|p| p.calls.get(label))
        .copied()
        .unwrap_or(0)
}

/// Checks of the pin-churn run against its own summary.
pub fn pin_churn_checks(r: &Report, s: &PinChurnSummary) -> Vec<Check> {
    let reg = calls(r, s.pid, "io_uring_register:register-buffers");
    let unreg = calls(r, s.pid, "io_uring_register:unregister-buffers");
    let hist = r
        .operations
        .iter()
        .find(|o| o.name == "io_uring_register:register-buffers");
    let mut out = vec![
        check(
            "registrations counted",
            reg == s.registrations,
            format!("tracer {reg}, workload {}", s.registrations),
        ),
        check(
            "unregistrations counted",
            unreg == s.unregistrations,
            format!("tracer {unreg}, workload {}", s.unregistrations),
        ),
        check(
            "registration latency histogram",
            hist.is_some_and(|h| h.latency.count == s.registrations && !h.latency.buckets.is_empty()),
            hist.map_or("missing".into(), |h| {
                format!(
                    "{} samples, p50 {} ns, p99 {} ns",
                    h.latency.count, h.latency.p50, h.latency.p99
                )
            }),
        ),
        check(
            "no events lost",
            r.loss.complete,
            format!("ring buffer drops {}", r.loss.ringbuf_drops),
        ),
    ];
    match &r.pin_counters.delta {
        Some(d) => out.push(check(
            "nr_foll_pin delta covers the registered pages",
            // A system-wide counter: other activity adds to it, and kernels
            // differ in how they account pages already pinned (6.1 counted
            // 0.4% fewer for io_uring buffers than were registered), so
            // "consistent" means within 2% below and bounded above.
            d.acquired * 100 >= s.pages_registered * 98
                && d.released * 100 >= s.pages_registered * 98
                && d.acquired <= 2 * (s.pages_registered + s.odirect_pages) + 4096,
            format!(
                "acquired +{}, released +{}, workload registered {} pages (+{} O_DIRECT pages)",
                d.acquired, d.released, s.pages_registered, s.odirect_pages
            ),
        )),
        None => out.push(check(
            "nr_foll_pin delta covers the registered pages",
            true,
            "skipping: /proc/vmstat has no nr_foll_pin counters".into(),
        )),
    }
    out
}

/// The trace arguments of a secondary workload: no `--json` (the first
/// workload's report is the command's), and its own recording and transfer
/// records (`FILE.<workload>`) when `--record FILE` / `--transfers FILE` were given.
fn sub(trace: &TraceArgs, name: &str) -> TraceArgs {
    let suffixed = |p: &PathBuf| {
        let mut s = p.clone().into_os_string();
        s.push(format!(".{name}"));
        PathBuf::from(s)
    };
    TraceArgs {
        json: None,
        record: trace.record.as_ref().map(suffixed),
        transfers: trace.transfers.as_ref().map(suffixed),
        ..trace.clone()
    }
}

/// A failed check per output file that could not be written.
fn written(errors: impl IntoIterator<Item = Error>) -> Vec<Check> {
    errors
        .into_iter()
        .map(|e| check("output files written", false, crate::error::describe(&e)))
        .collect()
}

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("gdrtrace-{}-{name}", std::process::id()))
}

fn print_checks(checks: &[Check]) {
    for c in checks {
        outln!("  {} {:<48} {}", if c.ok { "ok  " } else { "FAIL" }, c.name, c.detail);
    }
}

/// RDMA devices present (`/sys/class/infiniband`).
pub fn rdma_devices() -> Vec<String> {
    std::fs::read_dir("/sys/class/infiniband")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn op_calls(r: &Report, pid: u32, names: &[&str]) -> u64 {
    names.iter().map(|n| calls(r, pid, n)).sum()
}

fn attached(r: &Report, point: &str) -> bool {
    r.coverage
        .iter()
        .any(|c| c.point == point && c.status == Status::Attached)
}

/// Checks of the verbs workload against its own report: churn (registrations
/// and pages, exact) with `--writes 0`, then an RDMA WRITE run.
pub fn verbs_checks(r: &Report, v: &serde_json::Value) -> Vec<Check> {
    let pid = r
        .processes
        .iter()
        .find(|p| {
            p.calls
                .keys()
                .any(|k| k.starts_with("ibv_") || k.starts_with("ib_umem"))
        })
        .map_or(0, |p| p.pid);
    let n = v["registrations"].as_u64().unwrap_or(0);
    let m = v["pages_per_registration"].as_u64().unwrap_or(0);
    let page = v["page_size"].as_u64().unwrap_or(4096);
    let mut out = Vec::new();
    let reg = op_calls(r, pid, &["ibv_reg_mr"]);
    let churn = r
        .processes
        .iter()
        .find(|p| p.pid == pid)
        .and_then(|p| p.churn.clone())
        .unwrap_or_default();
    if attached(r, "libibverbs") {
        out.push(check(
            "ibv_reg_mr calls (uprobe)",
            reg == n,
            format!("tracer {reg}, workload {n}"),
        ));
        let dereg = op_calls(r, pid, &["ibv_dereg_mr"]);
        out.push(check(
            "ibv_dereg_mr calls (uprobe)",
            dereg == n,
            format!("tracer {dereg}, workload {n}"),
        ));
        out.push(check(
            "registry: registrations and deregistrations",
            churn.registrations == n && churn.deregistrations == n,
            format!(
                "registry {}/{}, workload {n}/{n} (nested ibv_reg_mr -> ibv_reg_mr_iova2 counted once)",
                churn.registrations, churn.deregistrations
            ),
        ));
        // Every MR the workload reports (address, length, lkey, rkey) is
        // one the tracer captured.
        let seen: std::collections::BTreeSet<(u64, u64, u64, u64)> = churn
            .mr_log
            .iter()
            .map(|m| (m.addr, m.length, m.lkey as u64, m.rkey as u64))
            .collect();
        let reported: Vec<(u64, u64, u64, u64)> = v["mrs"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|m| {
                        let f = |k: &str| m[k].as_u64().unwrap_or(0);
                        (f("addr"), f("length"), f("lkey"), f("rkey"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let matched = reported.iter().filter(|k| seen.contains(k)).count();
        out.push(check(
            "MR addr/length/lkey/rkey match the workload's",
            matched == reported.len() && !reported.is_empty(),
            format!(
                "{matched} of {} reported MRs captured with identical keys",
                reported.len()
            ),
        ));
        let host = r
            .operations
            .iter()
            .filter(|o| o.name == "ibv_reg_mr")
            .all(|o| o.transport == "host-only");
        out.push(check(
            "MR memory classified host-only",
            host,
            "ibv_reg_mr verdicts".into(),
        ));
    }
    if attached(r, "ib_umem_get") {
        let umem = calls(r, pid, "ib_umem_get");
        out.push(check(
            "ib_umem_get calls (kernel probe)",
            umem == n,
            format!("tracer {umem}, workload {n}"),
        ));
        let p = r.processes.iter().find(|p| p.pid == pid);
        let pinned = p.map_or(0, |p| p.pages_pinned);
        let unpinned = p.map_or(0, |p| p.pages_unpinned);
        let by_reg = p.map_or(0, |p| p.pages_pinned_by_registration);
        out.push(check(
            "pages pinned inside ib_umem_get = N x M",
            by_reg == n * m,
            format!(
                "tracer {by_reg} (of {pinned} pinned by the process), workload {n} x {m} = {}",
                n * m
            ),
        ));
        // Every page pinned by a registration must come back through the
        // unpin probes. Pins outside registration (made by libraries while
        // the process runs) may be released during exit, after the process
        // left the target set, so they are shown but not balanced.
        out.push(check(
            "unpin side covers registered pages",
            unpinned >= by_reg && unpinned <= pinned,
            format!(
                "unpinned {unpinned} >= {by_reg} pinned by registration (process pinned {pinned} in all, {} still held at exit)",
                pinned.saturating_sub(unpinned)
            ),
        ));
        if let Some(d) = &r.pin_counters.delta {
            let close = d.acquired.abs_diff(pinned) <= pinned / 20 + 64;
            out.push(check(
                "tracer pinned pages agree with nr_foll_pin delta",
                close,
                format!("tracer {pinned}, nr_foll_pin_acquired +{}", d.acquired),
            ));
        }
        let h = r.operations.iter().find(|o| o.name == "ib_umem_get");
        let plausible =
            h.is_some_and(|h| h.latency.count == n && h.latency.p50 >= 500 && h.latency.p50 < 1_000_000_000);
        out.push(check(
            "registration latency histogram (ib_umem_get)",
            plausible,
            h.map_or("missing".into(), |h| {
                format!(
                    "{} samples, p50 {} ns, bytes {}",
                    h.latency.count, h.latency.p50, h.bytes
                )
            }),
        ));
        let bytes = h.map_or(0, |h| h.bytes);
        out.push(check(
            "registered bytes = N x M x page",
            bytes == n * m * page,
            format!("tracer {bytes}, workload {}", n * m * page),
        ));
    } else {
        out.push(check(
            "ib_umem_get calls (kernel probe)",
            true,
            "skipping: ib_umem_get unavailable on this kernel (see coverage)".into(),
        ));
    }
    out.push(check(
        "no events lost",
        r.loss.complete,
        format!("ring buffer drops {}", r.loss.ringbuf_drops),
    ));
    out
}

fn verbs(trace: &TraceArgs, exe: &std::path::Path, reports: &mut Vec<(String, Report)>) -> Result<Vec<Check>> {
    let summary = temp_path("verbs.json");
    let base = vec![exe.display().to_string(), "drive".into(), "verbs".into()];
    let mut churn = base.clone();
    churn.extend(["--registrations", "32", "--pages", "16", "--writes", "0", "--summary"].map(String::from));
    churn.push(summary.display().to_string());
    let (report, churn_code, errors) = super::run::trace_command(&sub(trace, "verbs-churn"), &churn)?.finish();
    let text = std::fs::read_to_string(&summary).map_err(|e| Error::io(format!("reading {}", summary.display()), e));
    let _ = std::fs::remove_file(&summary);
    let mut checks = vec![check(
        "verbs churn exited cleanly",
        churn_code == 0,
        format!("exit status {churn_code}"),
    )];
    checks.extend(written(errors));
    let mut report = report;
    if let Ok(text) = text {
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::Workload(format!("verbs summary: {e}")))?;
        checks.extend(verbs_checks(&report, &v));
        report
            .workloads
            .push(serde_json::json!({ "workload": "verbs-churn", "summary": v }));
    }
    checks.extend(written(
        super::run::emit(&sub(trace, "verbs-churn"), Outputs::none(), &report).err(),
    ));
    reports.push(("verbs-churn".into(), report));
    let mut write = base;
    write.extend(["--registrations", "2", "--pages", "16", "--writes", "16"].map(String::from));
    let (_, write_code, errors) = super::run::trace_command(&sub(trace, "verbs-write"), &write)?.finish();
    checks.push(check(
        "RDMA WRITE between two RC QPs verified",
        write_code == 0,
        format!("exit status {write_code}"),
    ));
    checks.extend(written(errors));
    outln!("\nvalidate: verbs");
    print_checks(&checks);
    Ok(checks)
}

/// Traces a workload that writes `--summary FILE`; returns its judged
/// report, summary and exit status.
fn traced_workload(trace: &TraceArgs, argv: Vec<String>, name: &str) -> Result<(Report, serde_json::Value, i32)> {
    let summary = temp_path(&format!("{name}.json"));
    let mut argv = argv;
    argv.push("--summary".into());
    argv.push(summary.display().to_string());
    let trace = sub(trace, name);
    let (report, code, errors) = super::run::trace_command(&trace, &argv)?.finish();
    let text = std::fs::read_to_string(&summary).unwrap_or_default();
    let _ = std::fs::remove_file(&summary);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
    let mut report = report;
    report
        .workloads
        .push(serde_json::json!({ "workload": name, "summary": v }));
    if let Some(path) = &trace.record {
        crate::recording::append_workloads(path, &report.workloads)?;
    }
    for e in errors {
        errln!("gdrtrace: {}", crate::error::describe(&e));
    }
    Ok((report, v, code))
}

fn op_calls_transport(r: &Report, name: &str, transport: &str) -> u64 {
    r.operations
        .iter()
        .filter(|o| o.name == name && o.transport == transport)
        .map(|o| o.calls)
        .sum()
}

/// CUDA copies: the tracer's cuMemcpy* counts equal the workload's, and
/// pageable copies are host-staged while pinned ones are not.
pub fn cuda_copy_checks(r: &Report, v: &serde_json::Value) -> Vec<Check> {
    let mut out = Vec::new();
    let by_fn = v["calls_by_function"].as_object().cloned().unwrap_or_default();
    let mut expected: std::collections::BTreeMap<String, u64> = Default::default();
    for (f, n) in &by_fn {
        let base = crate::probes::uapi::TABLE
            .iter()
            .find(|row| crate::probes::uapi::is_variant(f, row.symbol))
            .map_or(f.clone(), |row| row.name.to_string());
        *expected.entry(base).or_default() += n.as_u64().unwrap_or(0);
    }
    for (name, n) in &expected {
        let got: u64 = r.operations.iter().filter(|o| &o.name == name).map(|o| o.calls).sum();
        out.push(check(
            &format!("{name} calls"),
            got == *n,
            format!("tracer {got}, workload {n}"),
        ));
    }
    let case_calls = |case: &str| -> u64 {
        v["results"].as_array().map_or(0, |a| {
            a.iter()
                .filter(|x| x["case"] == case)
                .filter_map(|x| x["calls"].as_u64())
                .sum()
        })
    };
    for (case, op) in [("h2d-pageable", "cuMemcpyHtoD"), ("d2h-pageable", "cuMemcpyDtoH")] {
        let want = case_calls(case);
        let got = op_calls_transport(r, op, "host-staged");
        out.push(check(
            &format!("{case} copies are host-staged"),
            got == want,
            format!("tracer {got} host-staged, workload {want}"),
        ));
    }
    for (case, op) in [("h2d-pinned", "cuMemcpyHtoD"), ("d2h-pinned", "cuMemcpyDtoH")] {
        let want = case_calls(case);
        let got = op_calls_transport(r, op, "gpu-host-dma");
        out.push(check(
            &format!("{case} copies are not staged"),
            got >= want && want > 0,
            format!("tracer {got} direct DMA, workload {want}"),
        ));
    }
    out
}

/// NCCL: every rank's verdict is the mode's transport, calls match, and
/// host-staged bytes appear exactly where the transport goes through host memory.
pub fn nccl_checks(r: &Report, v: &serde_json::Value, mode: &str, nvlink: Option<bool>) -> Vec<Check> {
    let expected = match (mode, nvlink) {
        ("auto", Some(false)) => "p2p/pcie",
        ("auto", _) => "p2p/nvlink",
        ("no-p2p", _) => "shm",
        _ => "socket",
    };
    let ranks = v["ranks"].as_u64().unwrap_or(0);
    let calls = v["calls"].as_u64().unwrap_or(0);
    let got: Vec<&str> = r.verdicts.iter().map(|x| x.transport.name()).collect();
    let mut out = vec![check(
        &format!("{mode}: every rank's verdict is {expected}"),
        got.len() as u64 == ranks && got.iter().all(|t| *t == expected),
        format!("verdicts {got:?} for {ranks} ranks"),
    )];
    let per_rank: Vec<u64> = r
        .verdicts
        .iter()
        .map(|x| {
            r.collectives
                .iter()
                .filter(|c| c.pid == x.pid && c.op == "ncclAllReduce")
                .map(|c| c.calls)
                .sum()
        })
        .collect();
    out.push(check(
        &format!("{mode}: ncclAllReduce calls per rank (in-kernel aggregation)"),
        per_rank.iter().all(|n| *n == calls),
        format!("tracer {per_rank:?}, workload {calls} per rank"),
    ));
    let staged = collective_staged_bytes(r);
    let should = expected == "shm" || expected == "socket";
    out.push(check(
        &format!("{mode}: host-staged bytes {}", if should { "reported" } else { "none" }),
        if should { staged > 0 } else { staged == 0 },
        format!("{staged} bytes through host memory"),
    ));
    out
}

/// Bytes of collectives whose transport goes through host memory.
fn collective_staged_bytes(r: &Report) -> u64 {
    r.collectives
        .iter()
        .filter(|c| matches!(c.transport, "shm" | "socket" | "host-staged"))
        .map(|c| c.bytes)
        .sum()
}

fn gpu(trace: &TraceArgs, exe: &std::path::Path, reports: &mut Vec<(String, Report)>) -> Result<Vec<Check>> {
    let base = |w: &str| vec![exe.display().to_string(), "drive".to_string(), w.to_string()];
    let mut checks = Vec::new();
    let mut cc = base("cuda-copy");
    cc.extend(["--sizes", "4K,1M,64M"].map(String::from));
    let (r, v, code) = traced_workload(trace, cc, "cuda-copy")?;
    checks.push(check(
        "cuda-copy exited cleanly",
        code == 0,
        format!("exit status {code}"),
    ));
    checks.extend(cuda_copy_checks(&r, &v));
    reports.push(("cuda-copy".into(), r));
    outln!("\nvalidate: cuda-copy (largest size per case)");
    outln!("  {:<14} {:>10} {:>12} {:>14}", "CASE", "GB/s", "CPU ms/GB", "VERDICT");
    if let Some(results) = v["results"].as_array() {
        let mut last: std::collections::BTreeMap<String, &serde_json::Value> = Default::default();
        for x in results {
            last.insert(x["case"].as_str().unwrap_or("?").to_string(), x);
        }
        for (case, x) in last {
            let verdict = if case.contains("pageable") {
                "host-staged"
            } else if case == "g2g-staged" {
                "host-staged (explicit)"
            } else {
                "direct"
            };
            outln!(
                "  {case:<14} {:>10.1} {:>12.1} {verdict:>14}",
                x["gbps"].as_f64().unwrap_or(0.0),
                x["cpu_s_per_gb"].as_f64().unwrap_or(0.0) * 1e3
            );
        }
    }
    let nvlink = crate::topo::discover().nvlink();
    outln!("\nvalidate: nccl all-reduce by transport mode");
    outln!(
        "  {:<14} {:<12} {:>12} {:>12} {:>14} {:>16}",
        "MODE",
        "VERDICT",
        "busbw GB/s",
        "8K us/call",
        "CPU us/call",
        "host-staged B"
    );
    for mode in ["auto", "no-p2p", "no-p2p-no-shm"] {
        let mut argv = base("nccl");
        argv.extend(["--mode", mode, "--sizes", "8K,64M"].map(String::from));
        let (r, v, code) = traced_workload(trace, argv, &format!("nccl-{mode}"))?;
        checks.push(check(
            &format!("nccl {mode} exited cleanly"),
            code == 0,
            format!("exit status {code}"),
        ));
        checks.extend(nccl_checks(&r, &v, mode, nvlink));
        let sizes = v["sizes"].as_array().cloned().unwrap_or_default();
        let big = sizes.last().cloned().unwrap_or_default();
        let small = sizes.first().cloned().unwrap_or_default();
        outln!(
            "  {mode:<14} {:<12} {:>12.1} {:>12.1} {:>14.1} {:>16}",
            r.verdicts.first().map_or("unknown", |x| x.transport.name()),
            big["busbw"].as_f64().unwrap_or(0.0),
            small["time_us"].as_f64().unwrap_or(0.0),
            big["cpu_us_per_call"].as_f64().unwrap_or(0.0),
            collective_staged_bytes(&r)
        );
        for x in &r.verdicts {
            if let Some(c) = &x.cause {
                outln!("  {:<14}   pid {}: {c}", "", x.pid);
            }
        }
        reports.push((format!("nccl-{mode}"), r));
    }
    outln!("\nvalidate: GPU checks");
    print_checks(&checks);
    Ok(checks)
}

/// UCX: the perftest's sends and bytes counted in the kernel, the path of
/// the mode's memory in both processes, staged bytes against the bytes
/// moved, UCX's own log, and (over RDMA, where the kernel probes are live)
/// the same registrations seen by the UCX probes, the verbs uprobes and
/// ib_umem_get.
pub fn ucx_checks(r: &Report, v: &serde_json::Value, mode: &str, expected: &[&str]) -> Vec<Check> {
    let f = |k: &str| v[k].as_u64().unwrap_or(0);
    let (client, server, iterations, bytes) = (
        f("client_pid") as u32,
        f("server_pid") as u32,
        f("iterations"),
        f("bytes"),
    );
    let memory = v["memory"].as_str().unwrap_or("host");
    let procs = r.ucx.as_ref().map_or(&[][..], |u| u.processes.as_slice());
    let find = |pid: u32| procs.iter().find(|p| p.pid == pid);
    let (c, srv) = (find(client), find(server));
    let mut out = vec![
        check(
            &format!("{mode}: sends counted (in-kernel aggregation)"),
            c.is_some_and(|c| c.data_calls == iterations),
            format!("tracer {}, perftest {iterations}", c.map_or(0, |c| c.data_calls)),
        ),
        check(
            &format!("{mode}: bytes sent"),
            c.is_some_and(|c| c.data_bytes == bytes),
            format!("tracer {}, perftest {bytes}", c.map_or(0, |c| c.data_bytes)),
        ),
    ];
    if v["test"].as_str().is_some_and(|t| t.starts_with("tag")) {
        out.push(check(
            &format!("{mode}: receives posted by the server"),
            srv.is_some_and(|s| s.receives == iterations),
            format!("tracer {}, perftest {iterations}", srv.map_or(0, |s| s.receives)),
        ));
    }
    for (who, p) in [("client", c), ("server", srv)] {
        let path = p.and_then(|p| p.paths.iter().find(|x| x.memory == memory));
        let got = path.map_or("none", |x| x.transport.name());
        out.push(check(
            &format!("{mode}: {who}'s {memory} memory path is {}", expected.join(" or ")),
            expected.contains(&got),
            format!(
                "{got} via {}{}",
                path.map_or("-", |x| x.path.as_str()),
                path.filter(|x| x.inferred).map_or("", |_| " (inferred)")
            ),
        ));
        if expected.contains(&"host-staged") {
            let staged = path.map_or(0, |x| x.staged_bytes);
            out.push(check(
                &format!("{mode}: {who}'s staged bytes within 1% of the bytes moved"),
                staged.abs_diff(bytes) * 100 <= bytes,
                format!("staged {staged}, perftest moved {bytes}"),
            ));
        }
        match path.and_then(|x| x.log.as_ref()) {
            Some(l) => out.push(check(
                &format!("{mode}: UCX's own log agrees ({who})"),
                l.agrees,
                l.ucx_says.clone(),
            )),
            None => out.push(check(
                &format!("{mode}: UCX's own log agrees ({who})"),
                true,
                "skipping: UCX's log says nothing about this process's transports".into(),
            )),
        }
    }
    if mode == "host-rc" {
        out.extend(ucx_registration_checks(
            r,
            mode,
            &[("client", client), ("server", server)],
        ));
    }
    out.push(check(
        &format!("{mode}: no events lost"),
        r.loss.complete,
        format!("ring buffer drops {}", r.loss.ringbuf_drops),
    ));
    out
}

/// Over RDMA: each process's registrations as UCX made them (UCT memory
/// domain, a wrapper counted once), as libibverbs saw them (MRs), and as
/// the kernel pinned them (`ib_umem_get`, where kernel probes are live).
pub fn ucx_registration_checks(r: &Report, mode: &str, pids: &[(&str, u32)]) -> Vec<Check> {
    let procs = r.ucx.as_ref().map_or(&[][..], |u| u.processes.as_slice());
    let kernel = attached(r, "ib_umem_get");
    pids.iter()
        .map(|(who, pid)| {
            let ucx = procs.iter().find(|p| p.pid == *pid).map_or(0, |p| p.registrations);
            let mrs = r
                .processes
                .iter()
                .find(|p| p.pid == *pid)
                .and_then(|p| p.churn.as_ref())
                .map_or(0, |c| c.registrations);
            let umem = calls(r, *pid, "ib_umem_get");
            let ok = ucx > 0 && ucx == mrs && (!kernel || umem == mrs);
            let detail = if kernel {
                format!("UCX probes {ucx}, verbs uprobes {mrs}, ib_umem_get {umem}")
            } else {
                format!("UCX probes {ucx}, verbs uprobes {mrs} (ib_umem_get unavailable on this kernel)")
            };
            check(
                &format!("{mode}: {who}'s registrations equal at every layer"),
                ok,
                detail,
            )
        })
        .collect()
}

/// UCX: ucx_perftest in every mode this machine supports, traced.
fn ucx(trace: &TraceArgs, exe: &std::path::Path, reports: &mut Vec<(String, Report)>) -> Result<Vec<Check>> {
    use crate::drive::ucx::{self as drive_ucx, UcxMode};
    let Some(perftest) = drive_ucx::find_perftest(None) else {
        println!("validate: ucx: skipping: ucx_perftest is not on PATH (Debian: ucx-utils; PyPI: libucx-cu12)");
        return Ok(Vec::new());
    };
    let gpus = crate::topo::discover().gpus.len();
    let cuda = drive_ucx::memory_types(&perftest).iter().any(|m| m == "cuda");
    let mut checks = Vec::new();
    println!("\nvalidate: ucx ({})", perftest.display());
    println!(
        "  {:<12} {:<12} {:<14} {:>8} {:>12} {:>10} {:>14}  UCX LOG",
        "MODE", "VERDICT", "PATH", "SENDS", "BYTES", "MB/s", "STAGED B"
    );
    for mode in UcxMode::ALL {
        let skip = match mode {
            // UCT alone: the VM tier's Soft-RoCE check (tests/vm/checks/50-ucx.sh).
            UcxMode::HostRcUct => continue,
            UcxMode::HostRc if rdma_devices().is_empty() => Some("no RDMA device"),
            UcxMode::Cuda | UcxMode::CudaNoIpc if gpus == 0 => Some("no GPU"),
            UcxMode::Cuda | UcxMode::CudaNoIpc if !cuda => Some("this ucx_perftest has no CUDA memory type"),
            _ => None,
        };
        if let Some(why) = skip {
            println!("  {:<12} skipping: {why}", mode.name());
            continue;
        }
        let (size, iterations) = if mode.memory() == "cuda" {
            ("16M", "100")
        } else {
            ("1M", "50")
        };
        let log = temp_path(&format!("ucx-{mode}.log"));
        let mut argv = vec![exe.display().to_string(), "drive".into(), "ucx".into()];
        argv.extend(["--mode", mode.name(), "--size", size, "--iterations", iterations].map(String::from));
        argv.extend(["--perftest".to_string(), perftest.display().to_string()]);
        argv.extend(["--log".to_string(), log.display().to_string()]);
        let name = format!("ucx-{mode}");
        let (mut r, v, code) = traced_workload(trace, argv, &name)?;
        if let Ok(text) = std::fs::read_to_string(&log) {
            r.corroborate_ucx(&text);
        }
        let _ = std::fs::remove_file(&log);
        checks.push(check(
            &format!("ucx {mode} exited cleanly"),
            code == 0,
            format!("exit status {code}"),
        ));
        checks.extend(ucx_checks(&r, &v, mode.name(), mode.expected()));
        let client = v["client_pid"].as_u64().unwrap_or(0) as u32;
        let p = r
            .ucx
            .as_ref()
            .and_then(|u| u.processes.iter().find(|p| p.pid == client));
        let path = p.and_then(|p| p.paths.iter().find(|x| x.memory == mode.memory()));
        let log_says = path
            .and_then(|x| x.log.as_ref())
            .map_or("-", |l| if l.agrees { "agrees" } else { "DISAGREES" });
        println!(
            "  {:<12} {:<12} {:<14} {:>8} {:>12} {:>10.1} {:>14}  {log_says}",
            mode.name(),
            path.map_or("unknown", |x| x.transport.name()),
            path.map_or("-", |x| x.path.as_str()),
            p.map_or(0, |p| p.data_calls),
            p.map_or(0, |p| p.data_bytes),
            v["bandwidth_mb_s"].as_f64().unwrap_or(0.0),
            path.map_or(0, |x| x.staged_bytes)
        );
        reports.push((name, r));
    }
    println!("\nvalidate: ucx checks");
    print_checks(&checks);
    Ok(checks)
}

pub fn validate(args: &ValidateArgs) -> Result<i32> {
    run_validate(args).map(|(code, _)| code)
}

/// Runs validate; returns its exit status and each workload's report.
pub fn run_validate(args: &ValidateArgs) -> Result<(i32, Vec<(String, Report)>)> {
    let mut reports = Vec::new();
    let exe = std::env::current_exe().map_err(|e| Error::io("locating the gdrtrace binary", e))?;
    let summary = temp_path("pin-churn.json");
    let argv = vec![
        exe.display().to_string(),
        "drive".into(),
        "pin-churn".into(),
        "--iterations".into(),
        args.iterations.to_string(),
        "--summary".into(),
        summary.display().to_string(),
    ];
    let trace: &TraceArgs = &args.trace;
    // Every file is checked before any BPF is loaded.
    let files = Outputs::open(trace)?;
    let (report, code, errors) = super::run::trace_command(trace, &argv)?.finish();
    let text_summary =
        std::fs::read_to_string(&summary).map_err(|e| Error::io(format!("reading {}", summary.display()), e));
    let _ = std::fs::remove_file(&summary);
    let s: PinChurnSummary =
        serde_json::from_str(&text_summary?).map_err(|e| Error::Workload(format!("pin-churn summary: {e}")))?;
    let mut report = report;
    report
        .workloads
        .push(serde_json::json!({ "workload": "pin-churn", "summary": s }));
    let mut checks = vec![check(
        "pin-churn exited cleanly",
        code == 0,
        format!("exit status {code}"),
    )];
    checks.extend(pin_churn_checks(&report, &s));
    checks.extend(written(errors));
    checks.extend(written(super::run::emit(trace, files, &report).err()));
    outln!("\nvalidate: pin-churn ({})", s.line());
    print_checks(&checks);
    reports.push(("pin-churn".to_string(), report.clone()));
    if crate::topo::discover().gpus.is_empty() {
        outln!("validate: cuda-copy, nccl: skipping: no GPU (/proc/driver/nvidia/gpus is absent)");
    } else {
        let gpu_checks = gpu(&args.trace, &exe, &mut reports)?;
        checks.extend(gpu_checks);
    }
    if rdma_devices().is_empty() {
        outln!(
            "validate: verbs: skipping: no RDMA device (/sys/class/infiniband is empty; load rdma_rxe for Soft-RoCE)"
        );
    } else {
        let verbs_checks = verbs(trace, &exe, &mut reports)?;
        checks.extend(verbs_checks);
    }
    if args.no_ucx {
        println!("validate: ucx: skipped (--no-ucx)");
    } else {
        let ucx_checks = ucx(trace, &exe, &mut reports)?;
        checks.extend(ucx_checks);
    }
    // A family is missing when its functions exist in this kernel but none
    // could be attached; functions absent from the kernel (peer memory
    // without the nvidia module) are reported, not required.
    let absent = |c: &crate::probes::Coverage| {
        c.reason
            .as_deref()
            .is_some_and(|r| r.starts_with("not in /proc/kallsyms"))
    };
    let missing_kernel: Vec<&str> = [Family::Pinning, Family::Verbs, Family::PeerMem, Family::DmaBuf]
        .into_iter()
        .filter(|f| {
            let rows: Vec<_> = report.coverage.iter().filter(|c| c.family == *f).collect();
            !rows.iter().any(|c| c.status == Status::Attached) && !rows.iter().all(|c| absent(c))
        })
        .map(|f| f.name())
        .collect();
    let not_in_kernel: Vec<&str> = [Family::Pinning, Family::Verbs, Family::PeerMem, Family::DmaBuf]
        .into_iter()
        .filter(|f| report.coverage.iter().filter(|c| c.family == *f).all(absent))
        .map(|f| f.name())
        .collect();
    let failed = checks.iter().filter(|c| !c.ok).count();
    outln!("validate: {} checks passed, {} failed", checks.len() - failed, failed);
    if !missing_kernel.is_empty() {
        outln!(
            "validate: kernel probe families unavailable here: {} (see Signals; each point with -v)",
            missing_kernel.join(", ")
        );
    }
    if !not_in_kernel.is_empty() {
        outln!(
            "validate: kernel probe families whose functions this kernel does not have (module not loaded?): {}",
            not_in_kernel.join(", ")
        );
    }
    if failed > 0 {
        return Ok((1, reports));
    }
    if args.require_kernel_probes && !missing_kernel.is_empty() {
        errln!(
            "gdrtrace: kernel probe families unavailable: {}",
            missing_kernel.join(", ")
        );
        return Ok((3, reports));
    }
    Ok((0, reports))
}
