//! Verdicts that hold on real jobs (issue 12): `attach` to a job past its
//! communicator set-up, then `replay` of the recording and `explain` of the
//! full, untrimmed report (with the job's NCCL log) reach the live verdicts.
//!
//! The job is `tests/standin/nccl_job` over the libnccl **stand-in**
//! (`standin_nccl.c`: no GPU here): a launcher and two rank processes, as a
//! torch.multiprocessing job has, whose all-reduces move their bytes over a
//! real socket pair (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1, NCCL's
//! NET/Socket) or through host memory otherwise; with NCCL_DEBUG=INFO the
//! stand-in prints NCCL's INFO lines (a stand-in for NCCL's log). Probes,
//! kernel aggregation, socket syscalls and the tracer are real.
//!
//! What is proven:
//! - `attach_after_set_up_per_mode`: per mode, the live steady-state verdict
//!   of each rank (socket from its own send/recv bytes; shm from
//!   NCCL_P2P_DISABLE with no RDMA NIC; unknown where only the GPU link
//!   counters could decide and there are none), and that `replay` of the
//!   recording and `explain` of the report and of the recording, with the
//!   log, print exactly those verdicts and no DISAGREES.
//! - `two_jobs_in_different_modes_under_one_attach`: one `attach --comm` over
//!   two concurrent jobs (default and NCCL_P2P_DISABLE=1): each rank gets
//!   its own job's verdict.
//!
//! With `GDRTRACE_FIXTURES_OUT=DIR` the reports, recordings and logs are
//! also written there, with this machine's paths removed: that is how
//! `tests/fixtures/{reports,recordings,logs}/standin-attach-*` were made.
use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use gdrtrace::classify::{
    Transport,
    comm::{Basis, Verdict},
};
use integration_tests::{Report, can_trace, gdrtrace_path, read_report, run, stderr, stdout};

/// One attach at a time: the tests count on their own processes only.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

type StandIns = integration_tests::standin::NcclJob;

fn build(test: &str) -> StandIns {
    // A command name of this run's own, so `attach --comm` finds only its
    // jobs even when another test run shares the machine.
    integration_tests::standin::build_nccl_job(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        &format!("gdrtrace-verdicts-{}-{test}", std::process::id()),
        &job_comm(),
    )
}

/// The stand-in job's command name: `nj` and this test process's id
/// (at most the 15 characters the kernel keeps).
fn job_comm() -> String {
    format!("nj{}", std::process::id()).chars().take(15).collect()
}

/// The environment of each mode, as `gdrtrace drive nccl --mode` sets it.
fn mode_env(mode: &str) -> &'static [(&'static str, &'static str)] {
    match mode {
        "no-p2p" => &[("NCCL_P2P_DISABLE", "1")],
        "no-p2p-no-shm" => &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")],
        _ => &[],
    }
}

/// A running job and the file its stdout (the stand-in NCCL log) goes to.
struct Job {
    child: Child,
    log: PathBuf,
}

/// How long a stand-in job runs: long enough that loading and attaching
/// the probes (seconds on a loaded 2-core machine) plus the 3 s window end
/// before it does.
const JOB_SECS: u32 = 15;

impl Job {
    fn start(s: &StandIns, mode: &str, secs: u32, log: PathBuf) -> Job {
        let out = std::fs::File::create(&log).expect("creating the job log");
        let child = Command::new(&s.job)
            .arg(&s.nccl)
            .arg(secs.to_string())
            .arg("256")
            .env("NCCL_DEBUG", "INFO")
            .envs(mode_env(mode).iter().copied())
            .stdout(out)
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting nccl_job");
        let job = Job { child, log };
        // Past the set-up: both ranks created their communicator.
        let until = Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(&job.log)
            .unwrap_or_default()
            .matches(" ready ")
            .count()
            < 2
        {
            assert!(Instant::now() < until, "nccl_job ranks not ready");
            std::thread::sleep(Duration::from_millis(20));
        }
        job
    }

    /// Ends the job (SIGUSR1: as at its time, its ranks print their
    /// counts) once the attach window is over, and returns its log.
    fn finish(mut self) -> String {
        // SAFETY: signalling the launcher this test started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGUSR1) };
        let st = self.child.wait().expect("waiting for nccl_job");
        assert!(st.success(), "nccl_job failed: {st}");
        std::fs::read_to_string(&self.log).expect("reading the job log")
    }
}

/// (pid, transport, basis) of each verdict.
fn verdicts(r: &Report) -> Vec<(u32, Transport, Basis)> {
    r.verdicts.iter().map(|v| (v.pid, v.transport, v.basis)).collect()
}

/// The verdict lines `explain` prints (`pid N comm: transport ...`).
fn verdict_lines(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| l.starts_with("pid ") && !l.contains("evidence"))
        .map(String::from)
        .collect()
}

/// Attaches with `args`, recording; returns (report, recording path).
fn attach(dir: &Path, name: &str, args: &[&str]) -> (Report, PathBuf) {
    let json = dir.join(format!("{name}.json"));
    let rec = dir.join(format!("{name}.rec"));
    let mut all = vec!["attach", "--duration", "3s", "--interval", "1s"];
    all.extend_from_slice(args);
    all.extend_from_slice(&[
        "--json",
        json.to_str().expect("UTF-8 path"),
        "--record",
        rec.to_str().expect("UTF-8 path"),
    ]);
    let o = run(&all);
    assert!(o.status.success(), "attach: {}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(
        !out.contains("transports ["),
        "interval line without the per-call mix:\n{out}"
    );
    (read_report(&json), rec)
}

/// `replay` and `explain` (of the report and of the recording, with the
/// log) reach the live verdicts; returns explain's output on the report.
fn check_replay_and_explain(report: &Report, json: &Path, rec: &Path, log: &Path) -> String {
    let live = verdicts(report);
    let replayed = rec.with_extension("replayed.json");
    let o = run(&[
        "replay",
        rec.to_str().expect("UTF-8 path"),
        "--json",
        replayed.to_str().expect("UTF-8 path"),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "replay: {}", stderr(&o));
    assert_eq!(
        verdicts(&read_report(&replayed)),
        live,
        "replay reaches the live verdicts"
    );
    let explained = |input: &Path| {
        let o = run(&[
            "explain",
            input.to_str().expect("UTF-8 path"),
            "--nccl-log",
            log.to_str().expect("UTF-8 path"),
        ]);
        assert!(o.status.success(), "explain {}: {}", input.display(), stderr(&o));
        assert!(!stderr(&o).contains("note:"), "re-judging agrees: {}", stderr(&o));
        stdout(&o)
    };
    let of_report = explained(json);
    let of_recording = explained(rec);
    assert!(!of_report.contains("DISAGREES"), "{of_report}");
    assert!(!of_recording.contains("DISAGREES"), "{of_recording}");
    let lines = verdict_lines(&of_report);
    assert_eq!(lines.len(), live.len(), "{of_report}");
    for (pid, transport, _) in &live {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("pid {pid} ")) && l.contains(&format!(": {}", transport.name()))),
            "explain prints pid {pid} {}:\n{of_report}",
            transport.name()
        );
    }
    assert_eq!(lines, verdict_lines(&of_recording), "explain of the recording");
    of_report
}

/// Writes the report, recording and log with this machine's paths removed.
fn keep(name: &str, s: &StandIns, json: &Path, rec: &Path, log: &Path) {
    let Some(out) = std::env::var_os("GDRTRACE_FIXTURES_OUT") else {
        return;
    };
    let out = PathBuf::from(out);
    let bin_dir = gdrtrace_path()
        .parent()
        .expect("binary directory")
        .to_str()
        .expect("binary directory")
        .to_string()
        + "/";
    let tmp = s.dir.to_str().expect("UTF-8 path").to_string() + "/";
    let clean = |p: &Path| {
        std::fs::read_to_string(p)
            .expect("reading an output")
            .replace(&bin_dir, "")
            .replace(&tmp, "standin/")
    };
    for (sub, from, to) in [
        ("reports", json, format!("{name}.json")),
        ("recordings", rec, format!("{name}.rec")),
        ("logs", log, format!("{name}.log")),
    ] {
        std::fs::create_dir_all(out.join(sub)).expect("creating a fixtures directory");
        std::fs::write(out.join(sub).join(to), clean(from)).expect("writing a fixture");
    }
}

fn ranks(r: &Report) -> &[Verdict] {
    &r.verdicts
}

#[test]
fn attach_after_set_up_per_mode() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !can_trace("attach_after_set_up_per_mode") {
        return;
    }
    let s = build("modes");
    for (mode, want) in [
        ("no-p2p-no-shm", Transport::Socket),
        ("no-p2p", Transport::Shm),
        ("auto", Transport::Unknown),
    ] {
        let log = s.dir.join(format!("{mode}.log"));
        let job = Job::start(&s, mode, JOB_SECS, log.clone());
        let launcher = job.child.id().to_string();
        let name = format!("standin-attach-{mode}");
        let (report, rec) = attach(&s.dir, &name, &["--pid", &launcher]);
        let text = job.finish();
        assert_eq!(text.matches(" calls=").count(), 2, "{text}");
        let v = ranks(&report);
        assert_eq!(v.len(), 2, "{mode}: one verdict per rank, none for the launcher: {v:?}");
        for v in v {
            assert_eq!(v.transport, want, "{mode}: {v:?}");
            assert_eq!(v.basis, Basis::SteadyState, "{mode}: {v:?}");
        }
        // The ranks are the launcher's children (parents recorded at attach).
        for v in v {
            let p = report.processes.iter().find(|p| p.pid == v.pid).unwrap();
            assert_eq!(p.parent.map(|x| x.to_string()), Some(launcher.clone()));
        }
        let json = s.dir.join(format!("{name}.json"));
        let explained = check_replay_and_explain(&report, &json, &rec, &log);
        if want != Transport::Unknown {
            let via = if want == Transport::Socket {
                "NET/Socket/0"
            } else {
                "SHM/direct/direct"
            };
            assert_eq!(
                explained.matches(&format!("NCCL log: via {via} (agrees)")).count(),
                2,
                "{explained}"
            );
        } else {
            assert_eq!(
                explained.matches("(the tracer did not decide)").count(),
                2,
                "{explained}"
            );
        }
        // The kernel counted the collectives: the operations table says so.
        let o = run(&["replay", rec.to_str().unwrap()]);
        assert!(stdout(&o).contains("ncclAllReduce (kernel)"), "{}", stdout(&o));
        keep(&name, &s, &json, &rec, &log);
    }
}

#[test]
fn two_jobs_in_different_modes_under_one_attach() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !can_trace("two_jobs_in_different_modes_under_one_attach") {
        return;
    }
    let s = build("two");
    let a = Job::start(&s, "auto", JOB_SECS, s.dir.join("a.log"));
    let b = Job::start(&s, "no-p2p", JOB_SECS, s.dir.join("b.log"));
    let (pa, pb) = (a.child.id(), b.child.id());
    let name = "standin-attach-two-jobs";
    let (report, rec) = attach(&s.dir, name, &["--comm", &job_comm()]);
    let log = s.dir.join(format!("{name}.log"));
    let text = a.finish() + &b.finish();
    std::fs::write(&log, &text).unwrap();
    let parent = |pid: u32| report.processes.iter().find(|p| p.pid == pid).unwrap().parent;
    let v = ranks(&report);
    assert_eq!(v.len(), 4, "two ranks per job: {v:?}");
    for v in v {
        let want = match parent(v.pid) {
            // No GPU link counters here: only they could tell P2P from SHM.
            Some(p) if p == pa => Transport::Unknown,
            Some(p) if p == pb => Transport::Shm,
            other => panic!("rank of neither job (parent {other:?}): {v:?}"),
        };
        assert_eq!(v.transport, want, "{v:?}");
    }
    let json = s.dir.join(format!("{name}.json"));
    check_replay_and_explain(&report, &json, &rec, &log);
    keep(name, &s, &json, &rec, &log);
}
