//! The checks of `validate` for UCX and NIXL workloads: the perftest's
//! calls, paths and registrations, and NIXL's transfers.
use super::*;

/// UCX: the perftest's sends and bytes counted in the kernel, the path of
/// the mode's memory in both processes, staged bytes against the bytes
/// moved, UCX's own log, and (over RDMA, where the kernel probes are live)
/// the same registrations seen by the UCX probes, the verbs uprobes and
/// ib_umem_get.
pub fn ucx_checks(r: &Report, v: Option<&UcxSummary>, mode: &str, expected: &[&str]) -> Vec<Check> {
    let (client, server, iterations, bytes) =
        v.map_or((0, 0, 0, 0), |v| (v.client_pid, v.server_pid, v.iterations, v.bytes));
    let memory = v.map_or("host", |v| v.memory.as_str());
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
    if v.is_some_and(|v| v.test.starts_with("tag")) {
        out.push(check(
            &format!("{mode}: receives posted by the server"),
            srv.is_some_and(|s| s.receives == iterations),
            format!("tracer {}, perftest {iterations}", srv.map_or(0, |s| s.receives)),
        ));
    }
    for (who, p) in [("client", c), ("server", srv)] {
        let path = p.and_then(|p| r.path_of(p.pid, memory));
        let got = path.map_or("none", |x| x.transport.name());
        out.push(check(
            &format!("{mode}: {who}'s {memory} memory path is {}", expected.join(" or ")),
            expected.contains(&got),
            format!(
                "{got} via {}{}",
                path.map_or("-", |x| x.via.as_str()),
                path.filter(|x| x.basis == crate::classify::comm::Basis::SteadyState)
                    .map_or("", |_| " (inferred)")
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

/// No path is called direct while bytes went through host memory in its
/// time: a report's verdicts agree with its own byte accounting.
pub fn direct_paths_checks(name: &str, r: &Report) -> Vec<Check> {
    if r.paths.is_empty() {
        return Vec::new();
    }
    let bad: Vec<String> = r
        .paths
        .iter()
        .filter(|p| p.direct() && p.host_bytes as f64 >= 0.1 * p.bytes.max(1) as f64)
        .map(|p| {
            format!(
                "{} {} with {} bytes through host memory",
                p.label(),
                p.transport.name(),
                p.host_bytes
            )
        })
        .collect();
    vec![check(
        &format!("{name}: no path called direct has its bytes in host memory"),
        bad.is_empty(),
        if bad.is_empty() {
            format!("{} paths", r.paths.len())
        } else {
            bad.join("; ")
        },
    )]
}

/// NIXL: each phase's path in the initiator (READ: its GETs, WRITE: its
/// PUTs), its transport against UCX's own protocol table, its bytes
/// against what the workload moved (host bytes on a staged path, device
/// bytes on a direct one: within 5%), and the initiator's verdict.
pub fn nixl_checks(r: &Report, s: Option<&crate::drive::nixl::NixlSummary>) -> Vec<Check> {
    use crate::classify::path::OpClass;
    let Some(s) = s else {
        return vec![check("nixl: the workload's summary", false, "none was written".into())];
    };
    let mut out = vec![check("nixl: the data arrived intact", s.ok, s.line())];
    let pid = s.initiator.pid;
    let mut transports = Vec::new();
    for (op, class) in [("READ", OpClass::Get), ("WRITE", OpClass::Put)] {
        let moved = s.bytes_of(op);
        if moved == 0 {
            continue;
        }
        let path = r
            .paths
            .iter()
            .filter(|p| p.pid == pid && p.op == class)
            .max_by_key(|p| p.bytes);
        let Some(p) = path else {
            out.push(check(
                &format!("nixl {op}: the initiator has a {} path", class.name()),
                false,
                format!("no {} path of pid {pid}", class.name()),
            ));
            continue;
        };
        transports.push(p.transport);
        if let Some(l) = &p.log {
            out.push(check(
                &format!("nixl {op}: the path agrees with UCX's protocol"),
                l.agrees,
                format!("{} via {}; UCX: {}", p.transport.name(), p.via, l.ucx_says),
            ));
        }
        let (seen, what) = if p.host_staged {
            (p.host_bytes, "through host memory")
        } else {
            (p.device_bytes, "device to device")
        };
        let off = (seen as f64 - moved as f64) / moved as f64;
        out.push(check(
            &format!("nixl {op}: bytes {what} within 5% of those moved"),
            off.abs() <= 0.05,
            format!("tracer {seen}, workload {moved} ({:+.1}%)", off * 100.0),
        ));
    }
    if transports.len() == 2 {
        let mixed = transports[0] != transports[1];
        let v = r.verdicts.iter().find(|v| v.pid == pid);
        out.push(check(
            "nixl: the initiator's verdict sums up its paths",
            v.is_some_and(|v| (v.transport == crate::classify::Transport::Mixed) == mixed),
            v.map_or("no verdict".into(), |v| v.transport.name().to_string()),
        ));
    }
    out
}
