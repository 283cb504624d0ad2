//! Tests of the networks NCCL names (channel lines, plugins) and of the
//! connections per peer read from its log.
use super::{tests::ev, *};
use crate::classify::path::PeerGroup;

/// Every network NCCL names in its channel lines, as its sources format
/// them (src/transport/net.cc: `NET/%s/%d[(%d)][/GDRDMA][(PCI)][/Shared]`;
/// coll_net.cc: `COLLNET/%s/%d[/GDRDMA]`) with the names the plugins give
/// themselves (aws-ofi-nccl: Libfabric, AWS Libfabric, OFI;
/// nccl-rdma-sharp-plugins: IBext, IBext_v8, SHARP, UCX-RMA).
#[test]
fn every_network_nccl_names() {
    let gdr = Transport::GdrPeerMem;
    let staged = Transport::HostStaged;
    let cases = [
        ("NET/Socket/0", Plugin::Socket, "NET/Socket", Transport::Socket),
        ("NET/IB/2/GDRDMA", Plugin::Ib, "NET/IB/GDRDMA", gdr),
        // PXN through rank 1's NIC, a PCIe dma-buf mapping, shared buffers.
        ("NET/IB/0(1)/GDRDMA(PCI)/Shared", Plugin::Ib, "NET/IB/GDRDMA", gdr),
        ("NET/IB/3", Plugin::Ib, "NET/IB", staged),
        ("NET/Libfabric/0/GDRDMA", Plugin::Ofi, "NET/Libfabric/GDRDMA", gdr),
        ("NET/AWS Libfabric/1", Plugin::Ofi, "NET/AWS Libfabric", staged),
        ("NET/OFI/0/GDRDMA", Plugin::Ofi, "NET/OFI/GDRDMA", gdr),
        ("NET/IBext/0/GDRDMA", Plugin::IbExt, "NET/IBext/GDRDMA", gdr),
        ("NET/IBext_v8/1", Plugin::IbExt, "NET/IBext_v8", staged),
        ("COLLNET/SHARP/0/GDRDMA", Plugin::CollNet, "COLLNET/SHARP/GDRDMA", gdr),
        ("NVLS", Plugin::Nvls, "NVLS", Transport::P2pNvlink),
        ("NET/UCX-RMA/0", Plugin::Other, "NET/UCX-RMA", staged),
    ];
    for (via, plugin, name, t) in cases {
        let n = Net::of_via(via).unwrap_or_else(|| panic!("{via}"));
        assert_eq!((n.plugin, n.name(), transport_of_via(via)), (plugin, name, t), "{via}");
        // A report's name reads back as the same network.
        assert_eq!(Net::of_via(n.name()), Some(n), "{via}");
    }
    for via in [
        "P2P/CUMEM",
        "P2P/direct pointer/read",
        "SHM/direct/direct",
        "NET/",
        "RING/0",
    ] {
        assert_eq!(Net::of_via(via), None, "{via}");
    }
    // Reports of every version read: their names, and none for what is no network.
    let read = |net: &str| {
        let v: Verdict = serde_json::from_str(&format!(
            r#"{{"pid": 1, "comm": "r", "transport": "socket", "host_staged": true, "evidence": [],
                "cause": null, "nccl_log": null, "net": "{net}"}}"#
        ))
        .unwrap();
        v.net
    };
    assert_eq!(read("NET/IB/GDRDMA"), Some(Net::IB_GDR));
    assert_eq!(read("NET/Socket"), Some(Net::SOCKET));
    assert_eq!(read("P2P/CUMEM"), None);
    assert_eq!(
        serde_json::to_string(&Net::of_via("NET/AWS Libfabric/0").unwrap()).unwrap(),
        r#""NET/AWS Libfabric""#
    );
}

#[test]
fn plugin_networks_agree_with_their_transport() {
    assert!(via_agrees("NET/AWS Libfabric/0/GDRDMA", Transport::GdrDmabuf));
    assert!(via_agrees("NET/IBext_v8/0", Transport::HostStaged));
    assert!(via_agrees("COLLNET/SHARP/0/GDRDMA", Transport::GdrPeerMem));
    assert!(via_agrees("NVLS", Transport::P2pNvlink));
    // libfabric without GDR may run on its tcp provider; NCCL's verbs never do.
    assert!(via_agrees("NET/Libfabric/0", Transport::Socket));
    assert!(!via_agrees("NET/IBext/0", Transport::Socket));
    assert!(!via_agrees("NET/Libfabric/0/GDRDMA", Transport::HostStaged));
}

#[test]
fn nccl_net_names_the_network_of_the_evidence() {
    let env = |v: &str| [("NCCL_NET".to_string(), v.to_string())].into();
    let of = |t, v: &str| Net::of_evidence(t, &env(v)).map(|n| n.name());
    assert_eq!(of(Transport::HostStaged, "ofi"), Some("NET/OFI"));
    assert_eq!(
        of(Transport::GdrDmabuf, "aws libfabric"),
        Some("NET/AWS Libfabric/GDRDMA")
    );
    assert_eq!(of(Transport::GdrPeerMem, "ib"), Some("NET/IB/GDRDMA"));
    // NCCL_NET=Socket with RDMA evidence, or a plugin with socket evidence:
    // the evidence's network.
    assert_eq!(of(Transport::HostStaged, "Socket"), Some("NET/IB"));
    assert_eq!(of(Transport::Socket, "OFI"), Some("NET/Socket"));
    assert_eq!(of(Transport::P2pNvlink, "OFI"), None);
    let v = verdict(&{
        let mut e = ev(
            &[("ncclCommInitRank", 1), ("cuMemHostAlloc", 2)],
            &[("NCCL_NET", "AWS Libfabric")],
        );
        e.registrations = [("host".to_string(), 2)].into();
        e
    })
    .unwrap();
    assert_eq!(v.net.map(Net::name), Some("NET/AWS Libfabric"));
    assert_eq!(v.cause_kind, Some(CauseKind::OfiNoGdr));
}

/// 2 hosts x 2 GPUs and CollNet, as NCCL 2.28.9 prints them: each rank's
/// connections per peer rank, per group, and the channels it sends on.
#[test]
fn connections_per_peer_from_the_channel_lines() {
    let log = "a:10:10 [0] NCCL INFO ncclCommInitRank comm 0x10 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 1 commId 0x7 - Init START\n\
               a:10:10 [0] NCCL INFO 2 coll channels, 2 collnet channels, 16 nvls channels, 2 p2p channels, 2 p2p channels per peer\n\
               a:10:10 [0] NCCL INFO ncclCommInitRank comm 0x10 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 1 commId 0x7 - Init COMPLETE\n\
               a:10:60 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n\
               a:10:60 [0] NCCL INFO Channel 00/0 : 3[1] -> 0[0] [receive] via NET/IB/0/GDRDMA\n\
               a:10:60 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/IB/0(1)/GDRDMA\n\
               a:10:60 [0] NCCL INFO CollNet 00/0 : 0 [send] via COLLNET/SHARP/0/GDRDMA\n\
               a:10:60 [0] NCCL INFO CollNet 00/0 : 0 [receive] via COLLNET/SHARP/0/GDRDMA\n\
               b:20:20 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [send] via NET/AWS Libfabric/0\n";
    let peers = LogPeers::of_log(log);
    let c = peers.get(10, "0x10").expect("rank 0's connections");
    assert_eq!(c.rank, Some(0));
    assert_eq!(c.peers[&1], vec!["P2P/CUMEM"]);
    assert_eq!(c.peers[&3], vec!["NET/IB/0/GDRDMA"]);
    assert_eq!(c.peers[&2], vec!["NET/IB/0(1)/GDRDMA"]);
    assert_eq!(c.collnet, vec!["COLLNET/SHARP/0/GDRDMA"]);
    assert_eq!(c.nvls_channels, 16);
    let g = c.groups();
    assert_eq!(g[&PeerGroup::Local].ranks, vec![1]);
    assert_eq!(g[&PeerGroup::Local].vias, vec!["P2P/CUMEM", "NVLS"]);
    assert_eq!(g[&PeerGroup::Remote].ranks, vec![2, 3]);
    assert_eq!(
        g.values().map(|x| x.sends).collect::<Vec<_>>(),
        vec![1, 1, 1],
        "one send each: P2P, NET, CollNet"
    );
    assert!(g[&PeerGroup::Switch].ranks.is_empty());
    // A plugin's name keeps its space; lines outside a known communicator
    // still count for the process.
    assert_eq!(parse_nccl_log(log)[&20], vec!["NET/AWS Libfabric/0"]);
    assert!(peers.get(20, "0x10").is_none());
}

fn plain(pid: u32, transport: Transport, net: Option<Net>) -> Verdict {
    Verdict {
        pid,
        comm: String::new(),
        transport,
        host_staged: transport.staged(),
        basis: Basis::SetUp,
        evidence: vec![],
        cause: cause(&BTreeMap::new(), transport, &Network::default()),
        cause_kind: None,
        nccl_log: None,
        net,
        other_hosts: None,
        paths: Vec::new(),
    }
}

#[test]
fn the_log_names_the_plugin_where_it_agrees_and_nothing_else() {
    let log = "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/AWS Libfabric/0\n\
               h:2:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Libfabric/0/GDRDMA\n\
               h:3:3 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0\n\
               h:4:4 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n\
               h:4:4 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/OFI/0/GDRDMA\n\
               h:5:5 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/OFI/0/GDRDMA\n";
    let mut v = vec![
        plain(1, Transport::HostStaged, Some(Net::IB)),
        plain(2, Transport::HostStaged, Some(Net::IB)),
        plain(3, Transport::HostStaged, None),
        plain(4, Transport::P2pNvlink, None),
        plain(5, Transport::P2pNvlink, None),
    ];
    corroborate(&mut v, &parse_nccl_log(log), &Context::default());
    // Agrees: the plugin's name, and a cause that names it.
    assert_eq!(v[0].net.map(Net::name), Some("NET/AWS Libfabric"));
    assert_eq!(v[0].cause_kind, Some(CauseKind::OfiNoGdr));
    assert!(
        v[0].cause
            .as_deref()
            .unwrap()
            .starts_with("NET/AWS Libfabric (aws-ofi-nccl)")
    );
    // Disagrees: the evidence's network and cause stay.
    assert_eq!(v[1].net, Some(Net::IB));
    assert!(!v[1].nccl_log.as_ref().unwrap().agrees);
    assert!(v[1].cause.as_deref().unwrap().starts_with("NET/IB without"));
    // A verdict of a report older than `net` is not given one.
    assert_eq!(v[2].net, None);
    // NCCL's network where the tracer judged only P2P: not seen, not a
    // disagreement; with no P2P line to agree with, nothing agreed.
    let l = v[3].nccl_log.as_ref().unwrap();
    assert!(
        l.unseen.as_deref().unwrap().starts_with("NCCL says NET/OFI/0/GDRDMA"),
        "{l:?}"
    );
    let l = v[4].nccl_log.as_ref().unwrap();
    assert!(!l.agrees && l.unseen.is_some(), "{l:?}");
}
