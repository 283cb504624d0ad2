//! One job across nodes (issue 23): the communicator identity every rank
//! shares, read by a real uprobe at `ncclCommInitRank`'s entry, and
//! `gdrtrace job` joining the reports of two emulated nodes.
//!
//! The job is `tests/standin/nccl_job` over the libnccl **stand-in**
//! (`standin_nccl.c`, no GPU here), run once per "node": each run starts
//! one rank of a two-rank communicator (`NCCL_JOB_RANK`), with its own
//! `NCCL_HOSTID` (which is how NCCL tells hosts apart, and how the issue
//! emulates two nodes on one machine) and the same 128-byte `ncclUniqueId`
//! (`NCCL_JOB_ID_SEED`), passed by value as nccl.h declares it. The stand-in
//! prints, as NCCL does, `commId 0x...`: NCCL's own hash of the id it
//! received, computed with NCCL's code.
//!
//! What is proven:
//! - the tracer reads the id from the caller's stack at the entry and
//!   hashes it to the value the library printed (`comm_id`), with the rank
//!   and nranks, in `processes[].communicators` and `collectives[]`; the
//!   text report names it; `replay` of the recording gives the same;
//! - `gdrtrace job` over the two reports gives one communicator, 2 ranks,
//!   2 hosts, no rank missing; over one report it names the missing rank;
//!   JSON has schema `gdrtrace.job/v1` (a file that is not a report:
//!   bad_input.rs).
use std::{path::Path, process::Command};

use gdrtrace::job::Job;
use integration_tests::{
    Report, can_trace, gdrtrace_path, parse_as, parse_report, read_report, run, stderr, stdout, to_json,
};

/// The stand-in's `commId` (NCCL prints `%llx`, without leading zeros).
fn printed_comm_id(log: &str) -> u64 {
    let line = log
        .lines()
        .find(|l| l.contains("Init COMPLETE"))
        .unwrap_or_else(|| panic!("no Init COMPLETE line in the stand-in's log:\n{log}"));
    let hex = line
        .split_whitespace()
        .skip_while(|w| *w != "commId")
        .nth(1)
        .expect("commId value");
    u64::from_str_radix(hex.trim_start_matches("0x"), 16).expect("hex commId")
}

fn hex(s: &str) -> u64 {
    assert!(
        s.len() == 18
            && s.starts_with("0x")
            && s[2..].chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
        "comm_id is not 0x and 16 lowercase hex digits: {s}"
    );
    u64::from_str_radix(&s[2..], 16).expect("hex")
}

/// Traces one node's rank: returns (report, its path, recording path, stand-in log).
fn node(
    dir: &Path,
    job: &integration_tests::standin::NcclJob,
    rank: u32,
    host: &str,
) -> (Report, String, String, String) {
    let json = dir.join(format!("node{rank}.json"));
    let rec = dir.join(format!("node{rank}.rec"));
    let out = Command::new(gdrtrace_path())
        .args(["run", "--json"])
        .arg(&json)
        .arg("--record")
        .arg(&rec)
        .arg("--")
        .arg(&job.job)
        .arg(&job.nccl)
        .args(["1", "64"])
        .env("NCCL_DEBUG", "INFO")
        .env("NCCL_HOSTID", host)
        .env("NCCL_JOB_RANK", rank.to_string())
        .env("NCCL_JOB_ID_SEED", "0x9e3779b97f4a7c15")
        // The library is loaded after the tracer started, which attaches
        // it on its next look at the maps (every 250 ms): init after that.
        .env("NCCL_JOB_INIT_DELAY_MS", "1500")
        .output()
        .expect("running gdrtrace run");
    assert!(out.status.success(), "gdrtrace run failed: {}", stderr(&out));
    let s = |p: &Path| p.to_str().expect("UTF-8 path").to_string();
    (read_report(&json), s(&json), s(&rec), stdout(&out))
}

#[test]
fn one_communicator_across_two_emulated_nodes() {
    if !can_trace("one_communicator_across_two_emulated_nodes") {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("gdrtrace-job-{}", std::process::id()));
    let job = integration_tests::standin::build_nccl_job(&dir, "standin", "nccl_job");
    let (r0, j0, rec0, log0) = node(&dir, &job, 0, "node-a");
    let (r1, j1, _, log1) = node(&dir, &job, 1, "node-b");
    let want = printed_comm_id(&log0);
    assert_eq!(printed_comm_id(&log1), want, "both ranks passed one id");
    assert!(
        log0.contains(&format!("commId {want:#018x} rank 0 nranks 2")),
        "the text report names the communicator as NCCL does:\n{log0}"
    );

    for (rank, r) in [(0u32, &r0), (1, &r1)] {
        let comms: Vec<_> = r.processes.iter().flat_map(|p| &p.communicators).collect();
        assert_eq!(comms.len(), 1, "one communicator per node: {comms:?}");
        assert_eq!(
            hex(comms[0].comm_id.as_deref().expect("comm_id")),
            want,
            "the id the library received, hashed as NCCL does"
        );
        assert_eq!(comms[0].rank, Some(rank));
        assert_eq!(comms[0].nranks, Some(2));
        let coll = r
            .collectives
            .iter()
            .find(|c| c.op == "ncclAllReduce")
            .unwrap_or_else(|| panic!("no ncclAllReduce row: {:?}", r.collectives));
        assert_eq!(hex(coll.comm_id.as_deref().expect("comm_id")), want);
        assert_eq!((coll.rank, coll.nranks), (Some(rank), Some(2)));
    }
    assert!(
        !r0.facts.hostname.is_empty() && r0.facts.boot_id.len() >= 32,
        "the host facts carry NCCL's host-hash inputs: {:?}",
        r0.facts
    );

    // Replay rebuilds the same identity.
    let replayed = run(&["replay", "--format", "json", &rec0]);
    assert!(replayed.status.success(), "replay failed: {}", stderr(&replayed));
    let v = parse_report("replay JSON", &stdout(&replayed));
    assert_eq!(
        to_json(&v.collectives),
        to_json(&r0.collectives),
        "replay gives the same collectives"
    );
    let comms = |r: &Report| to_json(&r.processes.iter().map(|p| &p.communicators).collect::<Vec<_>>());
    assert_eq!(comms(&v), comms(&r0), "replay gives the same communicators");

    // The cross-node view.
    let out = run(&["job", "--format", "json", &j0, &j1]);
    assert!(out.status.success(), "job failed: {}", stderr(&out));
    let view: Job = parse_as("job JSON", &stdout(&out));
    assert_eq!(view.schema, "gdrtrace.job/v1");
    let cs = &view.communicators;
    assert_eq!(cs.len(), 1, "one communicator: {view:?}");
    let c = &cs[0];
    assert_eq!(hex(c.comm_id.as_deref().expect("a commId")), want);
    assert_eq!(c.nranks, Some(2));
    assert_eq!(c.hosts, 2, "NCCL_HOSTID makes two hosts: {c:?}");
    assert!(c.missing.is_empty(), "{c:?}");
    let ranks = &c.ranks;
    assert_eq!(ranks.iter().map(|r| r.rank).collect::<Vec<_>>(), [Some(0), Some(1)]);
    assert_eq!(
        ranks.iter().map(|r| r.host.as_str()).collect::<Vec<_>>(),
        ["node-a", "node-b"]
    );
    assert!(ranks.iter().all(|r| r.calls > 0), "each rank's calls: {c:?}");

    let text = stdout(&run(&["job", &j0, &j1]));
    assert!(text.contains("# Communicator commId"), "{text}");
    assert!(
        text.contains("#  Rank  0 Pid") && text.contains("on       node-a"),
        "{text}"
    );
    assert!(
        text.contains("#  Rank  1 Pid") && text.contains("on       node-b"),
        "{text}"
    );

    // One node's report: the other rank is named missing.
    let text = stdout(&run(&["job", &j0]));
    assert!(text.contains("rank 1 of 2: no report given"), "{text}");

    // A recording reads too, and gives the same view.
    let from_rec = run(&["job", "--format", "json", &rec0, &j1]);
    let v: Job = parse_as("job JSON", &stdout(&from_rec));
    assert_eq!(v.communicators[0].hosts, 2, "{v:?}");

    drop(job);
    let _ = std::fs::remove_dir_all(&dir);
}
