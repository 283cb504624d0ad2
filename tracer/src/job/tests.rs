use super::*;
use crate::{
    fixtures::replay_fixture,
    identity::ras::{self, RasAnswer, RasQuery},
};

/// The two-rank GPU recordings of `run` (both ranks in one file), made
/// before the tracer read `ncclUniqueId`: their init events' id slots held
/// registers, once read as two commIds of one rank each (issue 48).
const TWO_RANK_RUNS: [&str; 6] = [
    "gpu-h200-nccl-auto",
    "gpu-h200-nccl-no-p2p",
    "gpu-h200-nccl-no-p2p-no-shm",
    "gpu-h200-nodes-run-default",
    "gpu-h200-nodes-run-ib-disable",
    "gpu-h200-nodes-run-net-socket",
];

#[test]
fn old_two_rank_recordings_say_why_they_cannot_be_joined() {
    for name in TWO_RANK_RUNS {
        let (report, _) = replay_fixture(name);
        let job = join(&[(name.to_string(), report)]);
        assert!(
            job.communicators.is_empty(),
            "{name}: no communicator made of one rank's register values: {}",
            render(&job)
        );
        let mut ranks: Vec<(Option<u32>, Option<u32>, NoIdentity)> =
            job.unjoined.iter().map(|u| (u.rank, u.nranks, u.why)).collect();
        ranks.sort_by_key(|r| r.0);
        assert_eq!(
            ranks,
            [
                (Some(0), Some(2), NoIdentity::IdNotRead),
                (Some(1), Some(2), NoIdentity::IdNotRead)
            ],
            "{name}: both ranks, each with its init, neither with an id"
        );
        let text = render(&job);
        assert!(!text.contains("no report given"), "{name}: {text}");
        assert!(
            text.contains("was traced but its ncclUniqueId not read"),
            "{name}: says why: {text}"
        );
    }
}

/// NCCL's answer in the job of the two attach recordings below.
fn gpu_ras() -> RasQuery {
    let text = include_str!("../../../tests/fixtures/logs/gpu-h100-nodes-ras-json.txt");
    let json = text.strip_prefix("SERVER PROTOCOL 2\nOK\n").expect("the transcript");
    RasQuery {
        addr: "localhost:28028".into(),
        answer: RasAnswer::Status(ras::parse(json).expect("NCCL's JSON")),
        ns_pids: Default::default(),
    }
}

/// A recording replayed with an answer of NCCL's RAS fed after its inputs
/// (as the live trace would have, with `--nccl-ras`).
fn replay_with(name: &str, answer: Option<RasQuery>) -> Report {
    let path = crate::fixtures::dir().join(format!("{name}.rec.gz"));
    let rec = crate::cmd::replay::load(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut agg = crate::cmd::replay::aggregate(&rec, None);
    if let Some(q) = answer {
        agg.nccl_ras(q);
    }
    crate::cmd::replay::judged(&rec, &mut agg, None)
}

/// The two ranks of an emulated two-node torch job on one H100, each
/// attached after set-up by its own tracer (NCCL 2.28.9): no identity
/// alone; with the answer NCCL's RAS gave in that job, one communicator
/// with the `commId` of NCCL's own log.
#[test]
fn attached_gpu_ranks_join_through_nccls_ras() {
    let names = ["gpu-h100-nodes-attach-rank0", "gpu-h100-nodes-attach-rank1"];
    let plain: Vec<(String, Report)> = names.iter().map(|n| (n.to_string(), replay_with(n, None))).collect();
    let job = join(&plain);
    assert!(job.communicators.is_empty(), "{}", render(&job));
    assert_eq!(
        job.unjoined.iter().map(|u| (u.pid, u.why)).collect::<Vec<_>>(),
        [(1630, NoIdentity::SetUpNotTraced), (1631, NoIdentity::SetUpNotTraced)]
    );

    let log = include_str!("../../../tests/fixtures/logs/gpu-h100-nodes-attach.log");
    assert!(log.contains("commId 0xa2bd4a35a81cd717 - Init COMPLETE"));
    let asked: Vec<(String, Report)> = names
        .iter()
        .map(|n| (n.to_string(), replay_with(n, Some(gpu_ras()))))
        .collect();
    let comm = asked[0].1.processes[0]
        .communicators
        .iter()
        .find(|c| c.communicator == "0x458dd770")
        .expect("rank 0's communicator gets an identity");
    assert_eq!(comm.comm_id_source, Some(IdSource::NcclRas));
    assert!(
        asked[0]
            .1
            .collectives
            .iter()
            .all(|c| c.comm_id.as_deref() == Some("0xa2bd4a35a81cd717"))
    );
    let job = join(&asked);
    assert!(job.unjoined.is_empty(), "{}", render(&job));
    let c = &job.communicators[..];
    assert_eq!(c.len(), 1, "{}", render(&job));
    let c = &c[0];
    assert_eq!(c.comm_id.as_deref(), Some("0xa2bd4a35a81cd717"));
    assert_eq!(c.comm_id_sources, [IdSource::NcclRas]);
    assert_eq!((c.nranks, c.hosts), (Some(2), 2));
    assert_eq!(
        c.ranks
            .iter()
            .map(|r| (r.rank, r.pid, r.host.as_str()))
            .collect::<Vec<_>>(),
        [(Some(0), 1630, "gdrtrace-emu-0"), (Some(1), 1631, "gdrtrace-emu-1")]
    );
    assert!(c.missing.is_empty());
    let text = render(&job);
    assert!(text.contains("identity: NCCL's RAS service"), "{text}");

    // One rank's report: RAS says where the other one runs.
    let job = join(&asked[..1]);
    assert_eq!(job.communicators[0].missing, [1]);
    assert_eq!(
        job.communicators[0].missing_placed,
        [Placed {
            rank: 1,
            pid: 1631,
            host: "192.0.2.2".into()
        }]
    );
    assert!(render(&job).contains("rank 1 of 2: no report given (NCCL's RAS: pid 1631 on 192.0.2.2)"));
}

/// Without RAS, ranks holding the two ends of one TCP connection are one
/// job, with no commId; a rank whose connections reach no other stays
/// unjoined, saying so.
#[test]
fn connected_ranks_join_without_a_comm_id() {
    let names = ["gpu-h100-nodes-attach-rank0", "gpu-h100-nodes-attach-rank1"];
    let mut reports: Vec<(String, Report)> = names.iter().map(|n| (n.to_string(), replay_with(n, None))).collect();
    let c = Connection {
        local: "127.0.0.1:40000".parse().unwrap(),
        remote: "127.0.0.1:51234".parse().unwrap(),
    };
    let other = Connection {
        local: "127.0.0.1:40001".parse().unwrap(),
        remote: "10.0.0.9:22".parse().unwrap(),
    };
    reports[0].1.processes[0].connections = vec![c, other];
    reports[1].1.processes[0].connections = vec![c.reversed()];
    let job = join(&reports);
    assert!(job.unjoined.is_empty(), "{}", render(&job));
    let g = &job.communicators[0];
    assert_eq!(g.comm_id, None);
    assert_eq!(g.comm_id_sources, [IdSource::Connections]);
    assert_eq!(g.ranks.iter().map(|r| r.pid).collect::<Vec<_>>(), [1630, 1631]);
    assert_eq!(g.hosts, 2);
    assert!(render(&job).contains("# Job joined by TCP connections (no commId)"));

    reports[1].1.processes[0].connections = vec![other];
    let job = join(&reports);
    assert!(job.communicators.is_empty());
    assert!(
        job.unjoined[0]
            .tried
            .iter()
            .any(|t| t.contains("none of its 2 TCP connection(s) reaches another traced rank")),
        "{:?}",
        job.unjoined
    );
}

/// A rank attached with RAS and its peer attached without: the peer holds
/// the other end of a connection of a rank with a commId, so it joins that
/// communicator (source `connections`), at the rank RAS lists for its pid.
#[test]
fn a_rank_without_identity_joins_the_communicator_it_is_connected_to() {
    let c = Connection {
        local: "127.0.0.1:40000".parse().unwrap(),
        remote: "127.0.0.1:51234".parse().unwrap(),
    };
    let mut with = replay_with("gpu-h100-nodes-attach-rank0", Some(gpu_ras()));
    let mut without = replay_with("gpu-h100-nodes-attach-rank1", None);
    with.processes[0].connections = vec![c];
    without.processes[0].connections = vec![c.reversed()];
    let reports = [("a".to_string(), with), ("b".to_string(), without)];
    let job = join(&reports);
    assert!(job.unjoined.is_empty(), "{}", render(&job));
    assert_eq!(job.communicators.len(), 1, "{}", render(&job));
    let g = &job.communicators[0];
    assert_eq!(g.comm_id.as_deref(), Some("0xa2bd4a35a81cd717"));
    assert_eq!(g.comm_id_sources, [IdSource::NcclRas, IdSource::Connections]);
    assert_eq!(
        g.ranks
            .iter()
            .map(|r| (r.rank, r.pid, r.comm_id_source))
            .collect::<Vec<_>>(),
        [
            (Some(0), 1630, Some(IdSource::NcclRas)),
            (Some(1), 1631, Some(IdSource::Connections))
        ]
    );
    assert!(g.missing.is_empty(), "{}", render(&job));

    // Not connected: it stays unjoined, and rank 1 is missing.
    let mut reports = reports;
    reports[1].1.processes[0].connections.clear();
    let job = join(&reports);
    assert_eq!(job.unjoined.len(), 1, "{}", render(&job));
    assert_eq!(job.communicators[0].missing, [1]);
}
