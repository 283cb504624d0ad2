//! One job across two emulated nodes whose set-up was not traced (issue 44
//! item 5): each rank attached by its own `gdrtrace attach`, and the same
//! job under `gdrtrace serve`, read back through a real Prometheus.
//!
//! The job is `tests/standin/nccl_job` over the libnccl **stand-in** (no
//! GPU here), started once per "node" (`NCCL_JOB_RANK=0/1`, each with its
//! own `NCCL_HOSTID`); the two solo ranks join over TCP before init
//! (`NCCL_JOB_BOOTSTRAP`, as NCCL's bootstrap does) and all-reduce over that
//! connection (`NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1`: NET/Socket). With
//! `NCCL_RAS_ADDR` each rank's stand-in answers as NCCL 2.28's RAS service
//! does (`VERBOSE STATUS` in JSON, the communicator's hash and both ranks'
//! pids): one "RAS" per node.
//!
//! What is proven:
//! - attached after set-up without RAS, `gdrtrace job a.json b.json` joins
//!   the two ranks into one job by their TCP connection (no commId, source
//!   `connections`), two hosts, transport socket;
//! - attached with `--nccl-ras`, the same job joins into one communicator
//!   with the commId the stand-in printed, ranks 0 and 1, source `nccl-ras`;
//!   a run of the same job traced from its start (`gdrtrace run`, the id
//!   read at `ncclCommInitRank`) gives the same commId (`init-call`);
//! - the same job under `gdrtrace serve --nccl-ras`, scraped every second
//!   by Prometheus: `gdrtrace job --prometheus URL --match SELECTOR` gives
//!   the same communicator, ranks, pids, hosts and transports as the attach
//!   reports of that job.
use std::{
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use gdrtrace::{
    identity::IdSource,
    job::{Job, JobComm},
};
use integration_tests::{can_trace, gdrtrace_path, have, parse_as, path_str, run, stderr, stdout};

use crate::serve::{Agent, Prometheus, free_port, one_agent, wait_for};

const SEED: &str = "0x9e3779b97f4a7c15";

/// One rank of the job, started untraced; killed on drop.
struct Rank {
    child: Child,
    /// The rank's process (the job's forked child).
    pid: u32,
    /// The `commId` the stand-in printed at init.
    comm_id: u64,
    ras: u16,
}

impl Drop for Rank {
    fn drop(&mut self) {
        // SAFETY: signalling the rank process this test started.
        unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn printed_comm_id(line: &str) -> Option<u64> {
    let hex = line.split_whitespace().skip_while(|w| *w != "commId").nth(1)?;
    u64::from_str_radix(hex.trim_start_matches("0x"), 16).ok()
}

fn host(rank: u32) -> String {
    format!("node-{}", ["a", "b"][rank as usize])
}

/// The environment of one "node" of the job.
fn node_env(cmd: &mut Command, rank: u32, bootstrap: u16) {
    cmd.env("NCCL_DEBUG", "INFO")
        .env("NCCL_P2P_DISABLE", "1")
        .env("NCCL_SHM_DISABLE", "1")
        .env("NCCL_HOSTID", host(rank))
        .env("NCCL_JOB_RANK", rank.to_string())
        .env("NCCL_JOB_ID_SEED", SEED)
        .env("NCCL_JOB_BOOTSTRAP", bootstrap.to_string());
}

/// Starts both ranks untraced (each serving RAS on a port of its own) and
/// waits until both are past init.
fn start_job(job: &integration_tests::standin::NcclJob, secs: u32) -> Vec<Rank> {
    let bootstrap = free_port();
    let mut ranks = Vec::new();
    for rank in 0..2u32 {
        let ras = free_port();
        let mut cmd = Command::new(&job.job);
        cmd.arg(&job.nccl).args([&secs.to_string(), "64"]);
        node_env(&mut cmd, rank, bootstrap);
        let mut child = cmd
            .env("NCCL_RAS_ADDR", format!("127.0.0.1:{ras}"))
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting the stand-in job");
        let out = child.stdout.take().expect("piped stdout");
        ranks.push((rank, child, out, ras));
    }
    ranks
        .into_iter()
        .map(|(rank, child, out, ras)| {
            let mut lines = BufReader::new(out).lines();
            let (mut comm_id, mut pid) = (None, None);
            for line in lines.by_ref() {
                let line = line.expect("reading the job's output");
                if line.contains("Init COMPLETE") {
                    comm_id = printed_comm_id(&line);
                }
                if let Some(p) = line.strip_prefix(&format!("rank {rank} ready pid=")) {
                    pid = p.trim().parse().ok();
                    break;
                }
            }
            // Keep draining the output so the job never blocks on it.
            std::thread::spawn(move || lines.for_each(drop));
            Rank {
                child,
                pid: pid.unwrap_or_else(|| panic!("rank {rank} exited before init")),
                comm_id: comm_id.expect("an Init COMPLETE line with commId"),
                ras,
            }
        })
        .collect()
}

/// `gdrtrace attach --pid P --json FILE --duration D [--nccl-ras=ADDR]` of
/// each rank at once; returns the reports' paths.
fn attach_all(dir: &Path, ranks: &[Rank], tag: &str, ras: bool) -> Vec<String> {
    let children: Vec<(Child, PathBuf)> = ranks
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let json = dir.join(format!("{tag}{i}.json"));
            let mut cmd = Command::new(gdrtrace_path());
            cmd.args(["attach", "--pid", &r.pid.to_string(), "--duration", "4s", "--json"])
                .arg(&json);
            if ras {
                cmd.arg(format!("--nccl-ras=127.0.0.1:{}", r.ras));
            }
            let child = cmd
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawning gdrtrace attach");
            (child, json)
        })
        .collect();
    children
        .into_iter()
        .map(|(c, json)| {
            let out = c.wait_with_output().expect("waiting for gdrtrace attach");
            assert!(out.status.success(), "gdrtrace attach failed: {}", stderr(&out));
            path_str(&json).to_string()
        })
        .collect()
}

fn job_of(args: &[&str]) -> Job {
    let out = run(&[&["job", "--format", "json"], args].concat());
    assert!(out.status.success(), "gdrtrace job failed: {}", stderr(&out));
    parse_as("job JSON", &stdout(&out))
}

/// The one communicator of a view (panics with the view otherwise).
fn the_one(view: &Job) -> &JobComm {
    assert_eq!(view.communicators.len(), 1, "one communicator: {view:#?}");
    assert!(view.unjoined.is_empty(), "nothing left unjoined: {view:#?}");
    &view.communicators[0]
}

fn id(c: &JobComm) -> Option<u64> {
    c.comm_id
        .as_deref()
        .map(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex commId"))
}

/// (rank, pid, host) of each rank of `c`, in rank order.
fn members(c: &JobComm) -> Vec<(Option<u32>, u32, String)> {
    let mut m: Vec<_> = c.ranks.iter().map(|r| (r.rank, r.pid, r.host.clone())).collect();
    m.sort_by_key(|x| x.1);
    m
}

#[test]
fn two_nodes_attached_after_set_up_join_by_connections_and_by_ras() {
    let test = "two_nodes_attached_after_set_up_join_by_connections_and_by_ras";
    if !can_trace(test) || !have(test, "cc", "apt-get install gcc") {
        return;
    }
    // An agent of another test would trace these ranks too: one at a time.
    let _one = one_agent();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(integration_tests::unique("gdrtrace-job-nodes"));
    let job = integration_tests::standin::build_nccl_job(&dir, "standin", "nccl_job");

    // Traced from the start: the id read at ncclCommInitRank.
    let bootstrap = free_port();
    let runs: Vec<(Child, String)> = (0..2u32)
        .map(|rank| {
            let json = path_str(&dir.join(format!("run{rank}.json"))).to_string();
            let mut cmd = Command::new(gdrtrace_path());
            cmd.args(["run", "--json", &json, "--"])
                .arg(&job.job)
                .arg(&job.nccl)
                .args(["1", "64"]);
            node_env(&mut cmd, rank, bootstrap);
            // The tracer attaches the library on its next look at the maps.
            cmd.env("NCCL_JOB_INIT_DELAY_MS", "1500")
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            (cmd.spawn().expect("spawning gdrtrace run"), json)
        })
        .collect();
    let runs: Vec<String> = runs
        .into_iter()
        .map(|(c, json)| {
            let out = c.wait_with_output().expect("waiting for gdrtrace run");
            assert!(out.status.success(), "gdrtrace run failed: {}", stderr(&out));
            json
        })
        .collect();
    let from_start = job_of(&[&runs[0], &runs[1]]);
    let c = the_one(&from_start);
    assert_eq!(c.comm_id_sources, [IdSource::InitCall], "{c:#?}");
    let started = id(c).expect("a commId from the init call");

    // Attached after set-up, first without RAS, then with it.
    let t0 = Instant::now();
    let ranks = start_job(&job, 60);
    assert_eq!(ranks[0].comm_id, ranks[1].comm_id, "both ranks passed one id");
    assert_eq!(
        started, ranks[0].comm_id,
        "the run from the start read the id NCCL hashed"
    );
    let plain = attach_all(&dir, &ranks, "attach", false);
    let with_ras = attach_all(&dir, &ranks, "ras", true);
    println!("two attaches of both ranks: {:.1} s", t0.elapsed().as_secs_f64());
    drop(ranks);

    let by_conn = job_of(&[&plain[0], &plain[1]]);
    let c = the_one(&by_conn);
    assert_eq!(c.comm_id, None, "no commId without the set-up or RAS: {c:#?}");
    assert_eq!(c.comm_id_sources, [IdSource::Connections], "{c:#?}");
    assert_eq!(c.hosts, 2, "NCCL_HOSTID makes two hosts: {c:#?}");
    let mut hosts: Vec<String> = members(c).into_iter().map(|m| m.2).collect();
    hosts.sort();
    assert_eq!(hosts, [host(0), host(1)]);
    assert_eq!(c.transports, ["socket"], "{c:#?}");
    assert!(c.ranks.iter().all(|r| r.calls > 0), "each rank's calls: {c:#?}");
    let text = stdout(&run(&["job", &plain[0], &plain[1]]));
    println!("{text}{}", stdout(&run(&["job", &with_ras[0], &with_ras[1]])));
    assert!(text.contains("# Job joined by TCP connections (no commId)"), "{text}");

    let by_ras = job_of(&[&with_ras[0], &with_ras[1]]);
    let c = the_one(&by_ras);
    assert_eq!(
        id(c),
        Some(started),
        "RAS gives the commId of a run from the start: {c:#?}"
    );
    assert_eq!(c.comm_id_sources, [IdSource::NcclRas], "{c:#?}");
    assert_eq!((c.nranks, c.hosts), (Some(2), 2), "{c:#?}");
    assert!(c.missing.is_empty(), "{c:#?}");
    let m = members(c);
    let mut ranks_seen: Vec<Option<u32>> = m.iter().map(|m| m.0).collect();
    ranks_seen.sort();
    assert_eq!(ranks_seen, [Some(0), Some(1)]);
    assert_eq!(c.transports, by_conn.communicators[0].transports);
    assert_eq!(
        m.iter().map(|m| m.1).collect::<Vec<_>>(),
        members(&by_conn.communicators[0])
            .iter()
            .map(|m| m.1)
            .collect::<Vec<_>>(),
        "the same two processes"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn two_nodes_under_serve_read_back_through_prometheus() {
    let test = "two_nodes_under_serve_read_back_through_prometheus";
    if !can_trace(test)
        || !have(test, "prometheus", "apt-get install prometheus")
        || !have(test, "cc", "apt-get install gcc")
    {
        return;
    }
    let _one = one_agent();
    let t0 = Instant::now();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(integration_tests::unique("gdrtrace-job-prom"));
    let job = integration_tests::standin::build_nccl_job(&dir, "standin", "nccl_job");
    let ranks = start_job(&job, 60);
    let printed = ranks[0].comm_id;
    // The agent starts after the job's set-up: it finds the ranks in /proc
    // and asks node a's RAS (which lists the whole job) for their identity.
    let agent = Agent::start(&[
        "--exited-retention",
        "600s",
        &format!("--nccl-ras=127.0.0.1:{}", ranks[0].ras),
    ]);
    let prom = Prometheus::start(agent.addr());
    let pids = format!("{}|{}", ranks[0].pid, ranks[1].pid);
    let matcher = format!("pid=~\"{pids}\"");
    let q = format!("gdrtrace_transport_verdict_info{{{matcher},communicator=~\"0x.*\"}}");
    wait_for(
        "Prometheus to scrape both ranks' communicator",
        Duration::from_secs(40),
        || (prom.query(&q).len() >= 2).then_some(()),
    );
    // The attach view of the same job, while it runs.
    let reports = attach_all(&dir, &ranks, "ras", true);
    let url = format!("http://{}", prom.addr);
    let from_prom = job_of(&["--prometheus", &url, "--match", &matcher]);
    // The text view too, while the agent serves: once it stops, its
    // series go stale in Prometheus.
    let text = stdout(&run(&["job", "--prometheus", &url, "--match", &matcher]));
    println!(
        "serve, Prometheus and the attaches: {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    drop(ranks);
    agent.stop();
    let from_attach = job_of(&[&reports[0], &reports[1]]);

    let (p, a) = (the_one(&from_prom), the_one(&from_attach));
    assert_eq!(id(p), Some(printed), "the commId NCCL printed: {p:#?}");
    assert_eq!(p.comm_id, a.comm_id);
    assert_eq!((p.nranks, p.hosts), (a.nranks, a.hosts), "{p:#?}\n{a:#?}");
    assert_eq!(p.hosts, 2, "nccl_hostid tells the two nodes apart: {p:#?}");
    assert_eq!(members(p), members(a), "same ranks, pids and hosts");
    assert_eq!(p.transports, a.transports, "{p:#?}\n{a:#?}");
    assert_eq!(p.missing, a.missing);
    assert!(p.ranks.iter().all(|r| r.calls > 0), "each rank's calls: {p:#?}");
    println!("{text}{}", stdout(&run(&["job", &reports[0], &reports[1]])));
    assert!(
        text.contains(&format!(
            "# Communicator commId {}",
            a.comm_id.as_deref().unwrap_or("?")
        )),
        "{text}"
    );
    drop(prom);
    let _ = std::fs::remove_dir_all(&dir);
}
