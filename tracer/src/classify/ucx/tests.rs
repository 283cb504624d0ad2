use super::*;

fn proc_(data_bytes: u64, copies: Copies) -> UcxProcess {
    UcxProcess {
        pid: 7,
        comm: "ucx_perftest".into(),
        workers: 1,
        endpoints: 1,
        data_calls: 100,
        data_bytes,
        copies,
        traced_from_start: true,
        ..Default::default()
    }
}

fn cx(memory: &str, calls: &[(&str, u64)], env: &[(&str, &str)], socket: u64) -> Context {
    Context {
        calls: calls.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        socket_bytes: socket,
        nvlink: Some(true),
        memories: [memory.to_string()].into(),
        ..Default::default()
    }
}

const MB64: u64 = 64 << 20;

#[test]
fn cuda_ipc_from_handles_and_device_copies() {
    let u = proc_(
        MB64,
        Copies {
            calls: 10,
            gpu_gpu_bytes: MB64,
            ..Default::default()
        },
    );
    let p = paths(&u, &cx("cuda", &[("cuIpcOpenMemHandle", 1)], &[], 4096));
    assert_eq!(p.len(), 1);
    assert_eq!((p[0].transport, p[0].via.as_str()), (Transport::P2pNvlink, "cuda_ipc"));
    assert!(!p[0].host_staged);
    // The same without NVLink: PCIe.
    let mut c = cx("cuda", &[("cuIpcGetMemHandle", 1)], &[], 0);
    c.nvlink = Some(false);
    assert_eq!(paths(&u, &c)[0].transport, Transport::P2pPcie);
    // On a host with one GPU both ends are in its memory: same-device IPC,
    // not NVLink (ucx_perftest with both processes on GPU 0), and still
    // UCX's cuda_ipc, not staged.
    let mut c = cx("cuda", &[("cuIpcOpenMemHandle", 1)], &[], 4096);
    c.gpus = Some(1);
    let p = paths(&u, &c);
    assert_eq!(
        (p[0].transport, p[0].via.as_str()),
        (Transport::IpcSameDevice, "cuda_ipc")
    );
    assert!(!p[0].host_staged && !p[0].transport.staged());
    assert!(p[0].evidence[0].contains("no link at all"), "{:?}", p[0].evidence);
}

#[test]
fn cuda_copy_staging_counts_the_copied_bytes_and_its_carrier() {
    let copies = Copies {
        calls: 64,
        gpu_host_bytes: MB64,
        ..Default::default()
    };
    let u = proc_(MB64, copies);
    let env = [("UCX_TLS", "^cuda_ipc")];
    let tcp = paths(&u, &cx("cuda", &[], &env, MB64 + 8192));
    assert_eq!(
        (tcp[0].transport, tcp[0].via.as_str()),
        (Transport::HostStaged, "cuda_copy+tcp")
    );
    // At least what tcp carried (counted in the kernel, never sampled).
    assert_eq!(tcp[0].staged_bytes, MB64 + 8192);
    assert!(tcp[0].host_staged);
    assert!(tcp[0].cause.as_deref().unwrap().contains("excludes cuda_ipc"));
    let shm = paths(&u, &cx("cuda", &[], &[], 16384));
    assert_eq!(shm[0].via, "cuda_copy+shm");
    assert!(shm[0].cause.is_none(), "cuda_ipc not excluded: no env cause");
}

#[test]
fn attached_after_set_up_infers_from_counters_or_says_why_not() {
    let u = proc_(
        MB64,
        Copies {
            calls: 64,
            unknown_bytes: MB64,
            ..Default::default()
        },
    );
    let mut c = cx("unknown", &[], &[], 0);
    c.links = Some(GpuLinks {
        nvlink_between_gpus: true,
        nvlink_bytes: MB64,
        rdma_nics: 0,
        gpu_processes: None,
    });
    let p = paths(&u, &c);
    assert_eq!(
        (
            p[0].transport,
            (p[0].basis == crate::classify::comm::Basis::SteadyState)
        ),
        (Transport::P2pNvlink, true)
    );
    c.links = Some(GpuLinks {
        nvlink_between_gpus: true,
        nvlink_bytes: 0,
        rdma_nics: 0,
        gpu_processes: None,
    });
    let p = paths(&u, &c);
    assert_eq!(
        (p[0].transport, p[0].via.as_str()),
        (Transport::HostStaged, "cuda_copy+shm")
    );
    c.links = None;
    let p = paths(&u, &c);
    assert_eq!(p[0].transport, Transport::Unknown);
    assert!(p[0].evidence.iter().any(|e| e.contains("not enough")));
}

#[test]
fn an_attached_sender_without_copies_is_told_by_nvlink() {
    // cuda_ipc attached after set-up: the receiver copies, the sender
    // only sends; its buffer was allocated before the tracer came.
    let u = UcxProcess {
        traced_from_start: false,
        ..proc_(MB64, Copies::default())
    };
    let mut c = cx("unknown", &[], &[], 0);
    c.links = Some(GpuLinks {
        nvlink_between_gpus: true,
        nvlink_bytes: MB64,
        rdma_nics: 0,
        gpu_processes: None,
    });
    let p = paths(&u, &c);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(
        (
            p[0].memory.as_str(),
            p[0].transport,
            (p[0].basis == crate::classify::comm::Basis::SteadyState)
        ),
        ("cuda", Transport::P2pNvlink, true)
    );
    // No NVLink traffic and no copies: host memory.
    c.links = None;
    assert_eq!(paths(&u, &c)[0].memory, "host");
}

#[test]
fn no_data_no_path() {
    let u = UcxProcess {
        data_calls: 0,
        ..proc_(0, Copies::default())
    };
    assert!(paths(&u, &Context::default()).is_empty());
}

#[test]
fn host_memory_by_carrier() {
    let u = proc_(MB64, Copies::default());
    assert_eq!(paths(&u, &cx("host", &[], &[], MB64))[0].transport, Transport::Socket);
    assert_eq!(paths(&u, &cx("host", &[], &[], 8192))[0].transport, Transport::Shm);
    let mut rc = cx("host", &[], &[], 8192);
    rc.host_mrs = 4;
    let p = paths(&u, &rc);
    assert_eq!((p[0].transport, p[0].via.as_str()), (Transport::HostOnly, "rc/ud"));
    assert!(!p[0].host_staged);
}

#[test]
fn gpu_mrs_are_gpudirect_rdma() {
    let u = proc_(MB64, Copies::default());
    let mut c = cx("cuda", &[], &[], 0);
    c.gpu_mrs = 2;
    assert_eq!(paths(&u, &c)[0].transport, Transport::GdrPeerMem);
    c.gpu_mrs = 0;
    c.dmabuf_mrs = 2;
    assert_eq!(paths(&u, &c)[0].transport, Transport::GdrDmabuf);
}

#[test]
fn ucx_tls_aliases() {
    let env = |v: &str| BTreeMap::from([("UCX_TLS".to_string(), v.to_string())]);
    assert_eq!(tls_excludes(&BTreeMap::new(), "cuda_ipc"), None);
    assert_eq!(tls_excludes(&env("^cuda_ipc"), "cuda_ipc"), Some(true));
    assert_eq!(tls_excludes(&env("^cuda_ipc"), "cuda_copy"), Some(false));
    assert_eq!(tls_excludes(&env("tcp,cuda_copy"), "cuda_ipc"), Some(true));
    assert_eq!(tls_excludes(&env("sm,cuda"), "cuda_ipc"), Some(false));
    assert_eq!(tls_excludes(&env("all"), "cuda_ipc"), Some(false));
    assert_eq!(tls_excludes(&env("rc_x,sm"), "rc_mlx5"), Some(false));
    assert_eq!(tls_excludes(&env("^ib"), "rc_verbs"), Some(true));
    assert_eq!(tls_excludes(&env("tcp"), "posix"), Some(true));
}
