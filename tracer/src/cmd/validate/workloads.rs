//! The workloads validate runs, each traced and checked: verbs, the GPU
//! copies and NCCL, emulated nodes, UCX and NIXL.
use super::*;

pub(super) fn verbs(
    trace: &TraceArgs,
    exe: &std::path::Path,
    reports: &mut Vec<(String, Report)>,
) -> Result<Vec<Check>> {
    let summary = temp_path("verbs.json");
    let base = vec![exe.display().to_string(), "drive".into(), "verbs".into()];
    let mut churn = base.clone();
    churn.extend(["--registrations", "32", "--pages", "16", "--writes", "0", "--summary"].map(String::from));
    churn.push(summary.display().to_string());
    let churn_args = sub(trace, "verbs-churn");
    let (report, churn_code, errors) = traced(&churn_args, &churn, "verbs-churn")?.finish_writing(&churn_args);
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
        let typed = VerbsReport::deserialize(&v).map_err(|e| Error::Workload(format!("verbs summary: {e}")))?;
        checks.extend(verbs_checks(&report, &typed));
        report
            .workloads
            .push(serde_json::json!({ "workload": "verbs-churn", "summary": v }));
    }
    checks.extend(written(
        crate::cmd::run::emit(&churn_args, Outputs::none(), &report, None).err(),
    ));
    reports.push(("verbs-churn".into(), report));
    let mut write = base;
    write.extend(["--registrations", "2", "--pages", "16", "--writes", "16"].map(String::from));
    let write_args = sub(trace, "verbs-write");
    let (_, write_code, errors) = traced(&write_args, &write, "verbs-write")?.finish_writing(&write_args);
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

/// Traces `argv` as validate's step `name`: stderr says what is running
/// and for how long (`progress`).
pub(super) fn traced(trace: &TraceArgs, argv: &[String], name: &str) -> Result<crate::cmd::run::Outcome> {
    crate::progress::step(format!("validate: {name}"), || {
        crate::cmd::run::trace_command(trace, argv, crate::cmd::run::Announce::Quiet)
    })
}

/// Traces a workload that writes `--summary FILE`; returns its judged
/// report, its summary read as the driver's own type (None when it wrote
/// none, or one this build cannot read: the checks then compare with
/// nothing and fail) and its exit status. The summary goes into the
/// report's `workloads` as written.
pub(super) fn traced_workload<T: serde::de::DeserializeOwned>(
    trace: &TraceArgs,
    argv: Vec<String>,
    name: &str,
) -> Result<(Report, Option<T>, i32)> {
    let summary = temp_path(&format!("{name}.json"));
    let mut argv = argv;
    argv.push("--summary".into());
    argv.push(summary.display().to_string());
    let trace = sub(trace, name);
    let (report, code, errors) = traced(&trace, &argv, name)?.finish_writing(&trace);
    let text = std::fs::read_to_string(&summary).unwrap_or_default();
    let _ = std::fs::remove_file(&summary);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
    let typed = T::deserialize(&v).ok();
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
    Ok((report, typed, code))
}

pub(super) fn gpu(trace: &TraceArgs, exe: &std::path::Path, reports: &mut Vec<(String, Report)>) -> Result<Vec<Check>> {
    let base = |w: &str| vec![exe.display().to_string(), "drive".to_string(), w.to_string()];
    let mut checks = Vec::new();
    let mut cc = base("cuda-copy");
    cc.extend(["--sizes", "4K,1M,64M"].map(String::from));
    let (r, v, code) = traced_workload::<CudaCopyReport>(trace, cc, "cuda-copy")?;
    checks.push(check(
        "cuda-copy exited cleanly",
        code == 0,
        format!("exit status {code}"),
    ));
    checks.extend(cuda_copy_checks(&r, v.as_ref()));
    reports.push(("cuda-copy".into(), r));
    outln!("\nvalidate: cuda-copy (largest size per case)");
    outln!("  {:<14} {:>10} {:>12} {:>14}", "CASE", "GB/s", "CPU ms/GB", "VERDICT");
    if let Some(v) = &v {
        let mut last: std::collections::BTreeMap<String, &crate::drive::cuda_copy::CopyResult> = Default::default();
        for x in &v.results {
            last.insert(x.case.to_string(), x);
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
                x.gbps,
                x.cpu_s_per_gb * 1e3
            );
        }
    }
    let host = crate::topo::discover();
    checks.extend(nodes(trace, exe, reports, host.gpus.len())?);
    if host.gpus.len() < 2 {
        outln!(
            "\nvalidate: nccl transport modes: skipping: one GPU (P2P and SHM between GPUs need two; the emulated-node check above runs on one)"
        );
        // The cuda-copy checks still count, so they are shown.
        outln!("\nvalidate: GPU checks");
        print_checks(&checks);
        return Ok(checks);
    }
    let nvlink = host.nvlink();
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
        let (r, v, code) = traced_workload::<NcclReport>(trace, argv, &format!("nccl-{mode}"))?;
        checks.push(check(
            &format!("nccl {mode} exited cleanly"),
            code == 0,
            format!("exit status {code}"),
        ));
        checks.extend(nccl_checks(&r, v.as_ref(), mode, nvlink));
        let sizes = v.as_ref().map_or(&[][..], |v| &v.sizes);
        let (big, small) = (sizes.last(), sizes.first());
        outln!(
            "  {mode:<14} {:<12} {:>12.1} {:>12.1} {:>14.1} {:>16}",
            r.verdicts.first().map_or("unknown", |x| x.transport.name()),
            big.map_or(0.0, |x| x.busbw),
            small.map_or(0.0, |x| x.time_us),
            big.map_or(0.0, |x| x.cpu_us_per_call),
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

/// NCCL across emulated nodes (`drive nccl --hosts 2`: NCCL_HOSTID per
/// rank): 2 nodes on one GPU wherever a GPU exists, and 2 nodes x N GPUs
/// where N >= 2 exist.
pub(super) fn nodes(
    trace: &TraceArgs,
    exe: &std::path::Path,
    reports: &mut Vec<(String, Report)>,
    gpus: usize,
) -> Result<Vec<Check>> {
    let mut checks = Vec::new();
    let rdma = rdma_devices();
    if !rdma.is_empty() {
        outln!(
            "\nvalidate: nccl across emulated nodes: skipping: RDMA devices present ({}): NCCL would use NET/IB, the check expects NET/Socket",
            rdma.join(", ")
        );
        return Ok(checks);
    }
    let mut shapes = vec![(2usize, 1usize)];
    if gpus >= 2 {
        shapes.push((2, gpus));
    }
    outln!("\nvalidate: nccl all-reduce across emulated nodes (NCCL_HOSTID per rank)");
    outln!(
        "  {:<12} {:<24} {:>12} {:>16}  CAUSE",
        "NODES",
        "VERDICT",
        "1M us/call",
        "host-staged B"
    );
    for (hosts, per_host) in shapes {
        let label = format!("{hosts} nodes x {per_host} GPU");
        let nranks = hosts * per_host;
        let mut argv = vec![exe.display().to_string(), "drive".into(), "nccl".into()];
        argv.extend([
            "--hosts".to_string(),
            hosts.to_string(),
            "--nranks".into(),
            nranks.to_string(),
        ]);
        argv.extend(["--sizes", "8K,1M", "--iters", "200"].map(String::from));
        let name = format!("nccl-nodes-{hosts}x{per_host}");
        let (r, v, code) = traced_workload::<NcclReport>(trace, argv, &name)?;
        checks.push(check(
            &format!("{label}: exited cleanly"),
            code == 0,
            format!("exit status {code}"),
        ));
        checks.extend(nodes_checks(&r, v.as_ref(), &label));
        let big = v.as_ref().and_then(|v| v.sizes.last());
        let first = r.verdicts.first();
        outln!(
            "  {:<12} {:<24} {:>12.1} {:>16}  {}",
            format!("{hosts}x{per_host}"),
            first.map_or("unknown".to_string(), |x| format!(
                "{} ({})",
                x.transport.name(),
                x.net.map_or("-", |n| n.name())
            )),
            big.map_or(0.0, |x| x.time_us),
            collective_staged_bytes(&r),
            first.and_then(|x| x.cause.as_deref()).unwrap_or("-")
        );
        reports.push((name, r));
    }
    Ok(checks)
}

/// UCX: ucx_perftest in every mode this machine supports, traced.
pub(super) fn ucx(trace: &TraceArgs, exe: &std::path::Path, reports: &mut Vec<(String, Report)>) -> Result<Vec<Check>> {
    use crate::drive::ucx::{self as drive_ucx, UcxMode};
    let Some(perftest) = drive_ucx::find_perftest(None) else {
        outln!("validate: ucx: skipping: ucx_perftest is not on PATH (Debian: ucx-utils; PyPI: libucx-cu12)");
        return Ok(Vec::new());
    };
    let gpus = crate::topo::discover().gpus.len();
    let cuda = drive_ucx::memory_types(&perftest).iter().any(|m| m == "cuda");
    let mut checks = Vec::new();
    outln!("\nvalidate: ucx ({})", perftest.display());
    // The table is printed once every mode has run: each perftest prints its
    // own summary line while it runs, which would land between the rows.
    let mut rows = vec![format!(
        "  {:<12} {:<12} {:<14} {:>8} {:>12} {:>10} {:>14}  UCX LOG",
        "MODE", "VERDICT", "PATH", "SENDS", "BYTES", "MB/s", "STAGED B"
    )];
    for mode in UcxMode::ALL {
        let skip = match mode {
            // UCT alone: the VM tier's Soft-RoCE check (tests/vm/checks/50-ucx.sh).
            UcxMode::HostRcUct => continue,
            UcxMode::HostRc if rdma_devices().is_empty() => Some("no RDMA device"),
            UcxMode::Cuda | UcxMode::CudaNoIpc if gpus == 0 => Some("no GPU"),
            UcxMode::Cuda | UcxMode::CudaNoIpc if !cuda => Some("this ucx_perftest has no CUDA memory type"),
            // IPC between two processes on one GPU is a copy inside it, no link.
            UcxMode::Cuda if gpus < 2 => Some("one GPU: the IPC mode needs two"),
            _ => None,
        };
        if let Some(why) = skip {
            rows.push(format!("  {:<12} skipping: {why}", mode.name()));
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
        if gpus == 1 {
            // Both processes on the one GPU (the staged mode needs no second).
            argv.extend(["--gpus", "0,0"].map(String::from));
        }
        argv.extend(["--log".to_string(), log.display().to_string()]);
        let name = format!("ucx-{mode}");
        let (mut r, v, code) = traced_workload::<drive_ucx::UcxSummary>(trace, argv, &name)?;
        if let Ok(text) = std::fs::read_to_string(&log) {
            r.corroborate_ucx(&text);
            crate::explain::fill(&mut r);
        }
        let _ = std::fs::remove_file(&log);
        checks.push(check(
            &format!("ucx {mode} exited cleanly"),
            code == 0,
            format!("exit status {code}"),
        ));
        checks.extend(ucx_checks(&r, v.as_ref(), mode.name(), mode.expected()));
        let client = v.as_ref().map_or(0, |v| v.client_pid);
        let p = r
            .ucx
            .as_ref()
            .and_then(|u| u.processes.iter().find(|p| p.pid == client));
        let path = r.path_of(client, mode.memory());
        let log_says = path
            .and_then(|x| x.log.as_ref())
            .map_or("-", |l| if l.agrees { "agrees" } else { "DISAGREES" });
        rows.push(format!(
            "  {:<12} {:<12} {:<14} {:>8} {:>12} {:>10.1} {:>14}  {log_says}",
            mode.name(),
            path.map_or("unknown", |x| x.transport.name()),
            path.map_or("-", |x| x.via.as_str()),
            p.map_or(0, |p| p.data_calls),
            p.map_or(0, |p| p.data_bytes),
            v.as_ref().map_or(0.0, |v| v.bandwidth_mb_s),
            path.map_or(0, |x| x.staged_bytes)
        ));
        reports.push((name, r));
    }
    outln!("{}", rows.join("\n"));
    outln!("\nvalidate: ucx checks");
    print_checks(&checks);
    Ok(checks)
}

/// NIXL: a READ then a WRITE between two processes on one GPU (the
/// project's `drive nixl`), traced, with UCX's protocol table.
pub(super) fn nixl(
    trace: &TraceArgs,
    exe: &std::path::Path,
    reports: &mut Vec<(String, Report)>,
) -> Result<Vec<Check>> {
    let python = std::path::Path::new("python3");
    if !crate::drive::nixl::available(python) {
        outln!("validate: nixl: skipping: python3 cannot import NIXL (nixl_cu13, nixl_cu12 or nixl)");
        return Ok(Vec::new());
    }
    let log = temp_path("nixl.log");
    let mut argv = vec![exe.display().to_string(), "drive".into(), "nixl".into()];
    argv.extend(["--op", "both", "--size", "32M", "--iterations", "10", "--log"].map(String::from));
    argv.push(log.display().to_string());
    let (mut r, s, code) = traced_workload::<crate::drive::nixl::NixlSummary>(trace, argv, "nixl")?;
    if let Ok(text) = std::fs::read_to_string(&log) {
        r.corroborate_ucx(&text);
        crate::explain::fill(&mut r);
    }
    let _ = std::fs::remove_file(&log);
    let mut checks = vec![check("nixl exited cleanly", code == 0, format!("exit status {code}"))];
    checks.extend(nixl_checks(&r, s.as_ref()));
    outln!(
        "\nvalidate: nixl ({})",
        s.as_ref().map_or("no summary".to_string(), |s| s.line())
    );
    print_checks(&checks);
    reports.push(("nixl".to_string(), r));
    Ok(checks)
}
