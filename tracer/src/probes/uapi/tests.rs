use super::*;

#[test]
fn variants() {
    assert!(is_variant("cuMemcpyDtoH_v2", "cuMemcpyDtoH"));
    assert!(is_variant("cuMemcpyHtoDAsync_v2_ptsz", "cuMemcpyHtoDAsync"));
    assert!(is_variant("cuMemcpy", "cuMemcpy"));
    assert!(!is_variant("cuMemcpyDtoH_v2", "cuMemcpy"));
    assert!(!is_variant("cuMemcpyAsync", "cuMemcpy"));
    assert!(!is_variant("pncclAllReduce", "ncclAllReduce"));
}

#[test]
fn table_fits_op_space_and_six_registers() {
    assert!(op::USER_BASE as usize + TABLE.len() <= tracer_common::MAX_OPS as usize);
    assert!(TABLE.iter().all(|r| r.args.len() <= tracer_common::MAX_ARGS));
    assert_eq!(
        Lib::of_path("/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0"),
        Some(Lib::Ibverbs)
    );
    assert_eq!(Lib::of_path("/usr/lib/libcuda.so.1"), Some(Lib::Cuda));
    assert_eq!(Lib::of_path("/x/libcudart.so.12"), None);
}

#[test]
fn ucx_copies_in_wheels() {
    // libucx-cu12's layout, and auditwheel's renamed copies in nixl-cu13.
    let site = "/usr/lib/python3/site-packages";
    assert_eq!(Lib::of_path(&format!("{site}/libucx/lib/libucp.so.0")), Some(Lib::Ucp));
    assert_eq!(
        Lib::of_path(&format!("{site}/nixl_cu13.libs/libucp-b39b3ed9.so.0.0.0")),
        Some(Lib::Ucp)
    );
    assert_eq!(
        Lib::of_path(&format!("{site}/nixl_cu13.libs/libucs-14c218c5.so.0.0.0")),
        Some(Lib::Ucs)
    );
    assert_eq!(
        Lib::of_path(&format!("{site}/nixl_cu13.libs/libibverbs-1de1263b.so.1.14.48.0")),
        Some(Lib::Ibverbs)
    );
    // Transport modules are not the transport layer itself; a hyphenated
    // name without a hash is not renamed.
    assert_eq!(Lib::of_path("/usr/lib/x86_64-linux-gnu/ucx/libuct_ib.so.0"), None);
    assert_eq!(Lib::of_path("/x/libuct-extra.so.0"), None);
    assert_eq!(Lib::of_path("/x/libnl-3-47cd035c.so.200"), None);
}

/// Copies are summed per address pair in the sampled link, with their
/// return probe; the calls that change what backs an address start
/// new rows.
#[test]
fn copy_rows_are_keyed_by_addresses_and_sampled() {
    let by = |s: &str| TABLE.iter().find(|r| r.symbol == s).unwrap();
    for r in TABLE.iter().filter(|r| r.kind == Kind::Copy) {
        let c = config_of(r);
        assert_eq!(
            c.flags,
            op_flags::COPY_ROWS,
            "{}: summed, with a return (`SAMPLED` once it joins the cycle)",
            r.symbol
        );
        assert_eq!(r.group(), crate::probes::uprobes::Group::Exact);
        assert_eq!(r.traps_per_call(), 2);
        assert_ne!(c.key_args, 0, "{}", r.symbol);
        // The kernel sums a copy when it returned 0: the row's rule.
        assert!(r.succeeded(0) && !r.succeeded(1), "{}", r.symbol);
    }
    // dst, src; not the size or the stream.
    let h2d = config_of(by("cuMemcpyHtoDAsync"));
    assert_eq!((h2d.key_args, h2d.count_arg), (0b11, 2));
    // dst, dctx, src, sctx; not the size or the stream.
    let peer = config_of(by("cuMemcpyPeerAsync"));
    assert_eq!((peer.key_args, peer.count_arg), (0b1111, 4));
    for s in ["cuMemHostAlloc", "cuMemHostRegister", "cuMemFree", "cuMemAlloc"] {
        assert_ne!(config_of(by(s)).flags & op_flags::REGION, 0, "{s}");
    }
    // Context switches are entry-only, and a primary context's retain,
    // which UCX's cuda_copy makes around every copy, is in the budgeted
    // set-up link: neither moves the epoch.
    assert_eq!(config_of(by("cuCtxSetCurrent")).flags & op_flags::REGION, 0);
    let retain = by("cuDevicePrimaryCtxRetain");
    assert_eq!(config_of(retain).flags & op_flags::REGION, 0);
    assert_eq!(retain.group(), crate::probes::uprobes::Group::Setup);
    assert_ne!(
        config_of(retain).flags & op_flags::SETUP,
        0,
        "switched off with its link"
    );
    assert_eq!(config_of(by("ncclAllReduce")).flags & op_flags::REGION, 0);
}

#[test]
fn ucx_data_rows_aggregate_per_endpoint_with_a_sample() {
    for r in TABLE.iter().filter(|r| r.kind == Kind::UcxData) {
        let (count, dtype, handle) = r.coll.expect("data rows are aggregated");
        assert_eq!(dtype, tracer_common::NO_ARG, "{}: count is bytes", r.symbol);
        assert_eq!(r.args[count as usize], Arg::Bytes, "{}", r.symbol);
        assert_eq!(
            r.args[count as usize - 1],
            Arg::Addr,
            "{}: buffer before count",
            r.symbol
        );
        assert_eq!(handle, 0, "{}", r.symbol);
        let c = config_of(r);
        // Exact rows: `SAMPLED` only once the op joins the cycle.
        assert_eq!(r.group(), crate::probes::uprobes::Group::Exact, "{}", r.symbol);
        assert_eq!(
            c.flags,
            op_flags::AGGREGATE_ONLY | op_flags::ENTRY_ONLY | op_flags::SAMPLE_FIRST
        );
    }
    // Each form of uct_md_mem_reg keeps its own row: the v2 row comes first.
    let v2 = TABLE.iter().position(|r| r.symbol == "uct_md_mem_reg_v2").unwrap();
    let v1 = TABLE.iter().position(|r| r.symbol == "uct_md_mem_reg").unwrap();
    assert!(v2 < v1);
}
