//! The per-process metric families: a process's calls, bytes, paths,
//! estimates and transports (docs/serve.md).
use prometheus_client::{
    metrics::gauge::ConstGauge,
    registry::{Registry, Unit},
};

use super::*;

pub(super) fn process_families(reg: &mut Registry, s: &Snapshot, n: &mut usize) {
    let mut info = Family::new(
        "process_info",
        "A tracked GPU or RDMA process that moved or registered bytes (value 1): how it was discovered and whether it exited (kept until --exited-retention); with --labels pod, one per pod (and per command outside pods), whose process count is gdrtrace_processes",
        None,
    );
    let mut count = Family::new(
        "processes",
        "Tracked processes that moved or registered bytes behind these labels: 1 per process, with --labels pod the pod's (or the command's outside pods); sum() counts them in either mode",
        None,
    );
    for p in &s.processes {
        count.add(proc_labels(p), gauge(p.processes.max(1) as i64));
    }
    count.register(reg, n);
    for p in &s.processes {
        let labels = if p.pid == 0 {
            proc_labels(p)
        } else {
            with(
                proc_labels(p),
                &[
                    ("discovered_by", p.discovered_by),
                    ("exited", if p.exited { "true" } else { "false" }),
                    ("nccl_hostid", &p.nccl_hostid),
                ],
            )
        };
        info.add(labels, gauge(1));
    }
    info.register(reg, n);

    let mut verdict = Family::new(
        "transport_verdict_info",
        "The transport verdict of a process and its communicators (value 1), with the kind of evidence it rests on",
        None,
    );
    let verdict_labels = |p: &ProcessFigures, v: &VerdictFigures, c: &str, rank: &str, nranks: &str| {
        with(
            proc_labels(p),
            &[
                ("transport", v.transport),
                ("host_staged", if v.host_staged { "true" } else { "false" }),
                ("evidence_kind", v.evidence_kind),
                ("net", v.net),
                ("cause", v.cause),
                ("communicator", c),
                ("rank", rank),
                ("nranks", nranks),
            ],
        )
    };
    for p in &s.processes {
        if p.comm_verdicts.is_empty() {
            if let Some(v) = &p.verdict {
                verdict.add(verdict_labels(p, v, "", "", ""), gauge(1));
            }
            continue;
        }
        for c in &p.comm_verdicts {
            verdict.add(
                verdict_labels(p, &c.verdict, &c.communicator, &c.rank, &c.nranks),
                gauge(1),
            );
        }
    }
    verdict.register(reg, n);

    let path_labels = |p: &ProcessFigures, x: &PathFigures| {
        with(
            proc_labels(p),
            &[
                ("peer_kind", x.peer_kind),
                ("peer", &x.peer),
                ("op", x.op),
                ("memory", &x.memory),
                ("transport", x.transport),
                ("host_staged", if x.host_staged { "true" } else { "false" }),
            ],
        )
    };
    let mut path_info = Family::new(
        "path_info",
        "Each path of a process (a peer, an operation class, a memory type) with the transport judged from where its bytes went (value 1); at most 8 per process by bytes, the rest summed as op=\"other\"",
        None,
    );
    let mut path_bytes = Family::new(
        "path",
        "Bytes of a path's calls so far (estimated where the duty cycle sampled them, so a later estimate may revise them)",
        Some(Unit::Bytes),
    );
    let mut path_host = Family::new(
        "path_host",
        "Bytes that went through host memory in a path's time (copies between GPU and host memory, socket bytes)",
        Some(Unit::Bytes),
    );
    for p in &s.processes {
        for x in &p.paths {
            path_info.add(path_labels(p, x), gauge(1));
            path_bytes.add(path_labels(p, x), gauge(x.bytes as i64));
            path_host.add(path_labels(p, x), gauge(x.host_bytes as i64));
        }
    }
    path_info.register(reg, n);
    path_bytes.register(reg, n);
    path_host.register(reg, n);

    let mut moved = Family::new(
        "moved",
        "Bytes a process moved: copies (in-kernel totals, with the estimates of the off phases where the duty cycle sampled them) and collectives as counted in the kernel",
        Some(Unit::Bytes),
    );
    let mut staged = Family::new(
        "host_staged",
        "Bytes a process moved through host memory: pageable or staged copies, and collectives on a host-staged transport (shm, socket)",
        Some(Unit::Bytes),
    );
    let mut moved_est = Family::new(
        "moved_estimated",
        "Bytes a process moved, with the estimates of the collectives the duty cycle did not count (each off phase added once, when the rates on both sides of it are known; an off phase before an exit only up to its communicator's destroy): compare with gdrtrace_moved_bytes_total",
        Some(Unit::Bytes),
    );
    let mut staged_est = Family::new(
        "host_staged_estimated",
        "Bytes a process moved through host memory, with the estimates of the collectives the duty cycle did not count (as gdrtrace_moved_estimated_bytes_total)",
        Some(Unit::Bytes),
    );
    for p in &s.processes {
        moved.add(proc_labels(p), counter(p.moved_bytes));
        staged.add(proc_labels(p), counter(p.staged_bytes));
        moved_est.add(proc_labels(p), counter(p.moved_bytes_estimated));
        staged_est.add(proc_labels(p), counter(p.staged_bytes_estimated));
    }
    moved.register(reg, n);
    staged.register(reg, n);
    moved_est.register(reg, n);
    staged_est.register(reg, n);

    let mut calls = Family::new(
        "collective_calls",
        "Collective and point-to-point calls per communicator, counted in the kernel (in the duty cycle's on phases only: see gdrtrace_collective_estimated_calls_total)",
        None,
    );
    let mut calls_est = Family::new(
        "collective_estimated_calls",
        "Collective and point-to-point calls per communicator: counted, plus the estimates of the duty cycle's off phases from the rates on both sides of each (added once each closes; equal to gdrtrace_collective_calls_total where every call was counted)",
        None,
    );
    let mut bytes_est = Family::new(
        "collective_estimated",
        "Bytes of collective and point-to-point calls per communicator: counted, plus the estimates of the duty cycle's off phases (as gdrtrace_collective_estimated_calls_total)",
        Some(Unit::Bytes),
    );
    for p in &s.processes {
        for c in &p.communicators {
            let labels = comm_labels(p, c);
            calls.add(labels.clone(), counter(c.calls));
            calls_est.add(labels.clone(), counter(c.calls_estimated));
            bytes_est.add(labels, counter(c.bytes_estimated));
        }
    }
    calls.register(reg, n);
    calls_est.register(reg, n);
    bytes_est.register(reg, n);
    let mut ratio = Family::new(
        "collective_sampled_ratio",
        "Share of a process's traced time in which its collective, group and UCX data calls were counted (1: every call; below 1 the duty cycle sampled them, and the _estimated_ counters estimate the rest)",
        None,
    );
    for p in s.processes.iter().filter(|p| !p.communicators.is_empty()) {
        ratio.add(proc_labels(p), ConstGauge::new(p.collective_sampled_ratio));
    }
    ratio.register(reg, n);
    let mut bound = Family::new(
        "estimates_lower_bound",
        "1 where a process's _estimated_ figures are lower bounds: its sampled calls (copies, collectives) were mostly traps while counted, or began late in the on phase an estimate carries on, so untraced they ran faster than can be told (--collectives exact counts every call); 0 otherwise",
        None,
    );
    for p in &s.processes {
        bound.add(proc_labels(p), gauge(p.estimates_lower_bound as i64));
    }
    bound.register(reg, n);
    let mut bytes = Family::new(
        "collective",
        "Bytes of collective and point-to-point calls per communicator (count x data-type size), counted in the kernel",
        Some(Unit::Bytes),
    );
    for p in &s.processes {
        for c in &p.communicators {
            bytes.add(comm_labels(p, c), counter(c.bytes));
        }
    }
    bytes.register(reg, n);

    let mut regs = Family::new(
        "registrations",
        "Memory registrations (MRs, io_uring buffer sets, host registrations) by what backs the memory",
        None,
    );
    for p in &s.processes {
        for (backing, n, _) in &p.registrations {
            regs.add(with(proc_labels(p), &[("backing", backing)]), counter(*n));
        }
    }
    regs.register(reg, n);
    let mut deregs = Family::new(
        "deregistrations",
        "Memory deregistrations by what backs the memory",
        None,
    );
    for p in &s.processes {
        for (backing, _, n) in &p.registrations {
            deregs.add(with(proc_labels(p), &[("backing", backing)]), counter(*n));
        }
    }
    deregs.register(reg, n);

    let mut pinned = Family::new(
        "process_pinned",
        "Memory the kernel holds pinned for a process (VmPin)",
        Some(Unit::Bytes),
    );
    let mut cpu = Family::new(
        "process_cpu",
        "CPU time of a tracked process (user + system)",
        Some(Unit::Seconds),
    );
    for p in &s.processes {
        if let Some(b) = p.pinned_bytes {
            pinned.add(proc_labels(p), gauge(b as i64));
        }
        if let Some(c) = p.cpu_seconds {
            cpu.add(proc_labels(p), counter_f(c));
        }
    }
    pinned.register(reg, n);
    cpu.register(reg, n);

    let mut pin_pages = Family::new(
        "pinned_pages",
        "Pages pinned by the kernel's pinning functions for a process (kernel probes; only where fentry or kprobes load)",
        None,
    );
    let mut unpin_pages = Family::new(
        "unpinned_pages",
        "Pages unpinned by the kernel's unpinning functions for a process (kernel probes)",
        None,
    );
    let mut by_transport = Family::new(
        "calls",
        "Traced calls of a process by the transport verdict of each call",
        None,
    );
    let mut socket = Family::new(
        "socket",
        "Bytes through a process's socket send/recv syscalls (in-kernel totals), by direction",
        Some(Unit::Bytes),
    );
    let mut tcp_sent = Family::new(
        "tcp_sent",
        "Bytes a process sent over TCP, every send path (the network probes' in-kernel totals)",
        Some(Unit::Bytes),
    );
    let mut retransmits = Family::new(
        "tcp_retransmits",
        "TCP retransmissions on a process's sockets, one per retransmitted buffer (the network probes' in-kernel totals): the network lost packets",
        None,
    );
    let mut rdma = Family::new(
        "rdma_device_holder_info",
        "An RDMA device the process holds open (value 1): join with the node exporter's node_infiniband_* series on device to give a port's counters their jobs",
        None,
    );
    for p in &s.processes {
        if p.pages_pinned + p.pages_unpinned > 0 {
            pin_pages.add(proc_labels(p), counter(p.pages_pinned));
            unpin_pages.add(proc_labels(p), counter(p.pages_unpinned));
        }
        for (t, n) in &p.calls_by_transport {
            by_transport.add(with(proc_labels(p), &[("transport", t)]), counter(*n));
        }
        if p.tcp_sent_bytes + p.tcp_retransmits > 0 {
            tcp_sent.add(proc_labels(p), counter(p.tcp_sent_bytes));
            retransmits.add(proc_labels(p), counter(p.tcp_retransmits));
        }
        for d in &p.rdma_devices {
            rdma.add(with(proc_labels(p), &[("device", d)]), gauge(1));
        }
        if p.socket_sent_bytes + p.socket_received_bytes > 0 {
            socket.add(
                with(proc_labels(p), &[("direction", "sent")]),
                counter(p.socket_sent_bytes),
            );
            socket.add(
                with(proc_labels(p), &[("direction", "received")]),
                counter(p.socket_received_bytes),
            );
        }
    }
    pin_pages.register(reg, n);
    unpin_pages.register(reg, n);
    by_transport.register(reg, n);
    socket.register(reg, n);
    tcp_sent.register(reg, n);
    retransmits.register(reg, n);
    rdma.register(reg, n);
}
