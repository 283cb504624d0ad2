//! `--record` and `gdrtrace replay`: a live pin-churn run and the replay of
//! its recording produce the same report; broken recordings are refused
//! with one line and exit status 2.
use gdrtrace::recording::Header;
use integration_tests::{
    can_trace, parse_as, read_as, read_report, run, stderr, stdout, to_json, trace_event::TraceFile,
};

#[test]
fn replay_of_a_recorded_pin_churn_run_gives_the_same_report() {
    if !can_trace("replay_of_a_recorded_pin_churn_run_gives_the_same_report") {
        return;
    }
    let dir = integration_tests::scratch("rr");
    let (live, rec, replayed) = (dir.join("live.json"), dir.join("run.rec"), dir.join("replay.json"));
    let (tr_live, tr_replay) = (dir.join("live.transfers"), dir.join("replay.transfers"));
    let (tl_live, tl_replay) = (dir.join("live.trace.json"), dir.join("replay.trace.json"));
    let bin = integration_tests::gdrtrace_path();
    let o = run(&[
        "run",
        "--json",
        live.to_str().unwrap(),
        "--record",
        rec.to_str().unwrap(),
        "--transfers",
        tr_live.to_str().unwrap(),
        "--trace-event",
        tl_live.to_str().unwrap(),
        "--",
        bin.to_str().unwrap(),
        "drive",
        "pin-churn",
        "--iterations",
        "80",
        "--buffers",
        "2",
        "--pages",
        "4",
        "--odirect-mib",
        "1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&rec).unwrap();
    // The header reads into its type (its facts' modules a list among them).
    let header: Header = parse_as("the recording's header", text.lines().next().unwrap());
    assert_eq!(header.schema, "gdrtrace.recording/v1");
    let regs = text
        .lines()
        // io_uring_register(fd, IORING_REGISTER_BUFFERS = 0, ...), whatever
        // descriptor the ring got (the test may run with others inherited).
        .filter(|l| {
            l.contains("\"op\":\"io_uring_register\"")
                && l.split_once("\"args\":[\"")
                    .and_then(|(_, a)| a.split_once("\","))
                    .is_some_and(|(_, rest)| rest.starts_with("\"0x0\""))
        })
        .count();
    assert_eq!(regs, 80, "one event line per registration");
    assert!(text.lines().last().unwrap().contains("\"type\":\"footer\""));

    let r = run(&[
        "replay",
        rec.to_str().unwrap(),
        "--json",
        replayed.to_str().unwrap(),
        "--transfers",
        tr_replay.to_str().unwrap(),
        "--trace-event",
        tl_replay.to_str().unwrap(),
    ]);
    assert!(r.status.success(), "{}", stderr(&r));
    let (a, b) = (read_report(&live), read_report(&replayed));
    assert_eq!(to_json(&a), to_json(&b), "live and replayed reports differ");
    // The timeline is built from the aggregator's inputs: the same file live and replayed.
    let tl = std::fs::read_to_string(&tl_live).unwrap();
    assert!(
        tl == std::fs::read_to_string(&tl_replay).unwrap(),
        "live and replayed timelines differ"
    );
    let tl: TraceFile = read_as(&tl_live);
    let slices = tl
        .trace_events
        .iter()
        .filter(|e| e.ph == "X" && e.name == "io_uring_register:register-buffers")
        .count();
    assert_eq!(slices, 80, "a slice per registration");
    // Transfer records: one per registration, the same live and replayed.
    let t = std::fs::read_to_string(&tr_live).unwrap();
    assert_eq!(t, std::fs::read_to_string(&tr_replay).unwrap());
    assert_eq!(
        t.lines()
            .filter(|l| l.contains("\"op\":\"io_uring_register:register-buffers\""))
            .count(),
        80
    );
    // Churn accounting and the explain rule that reads it.
    let reg = &b.registration.processes[0];
    assert_eq!(
        reg.by_backing.get("io_uring").map(|b| b.registrations),
        Some(80),
        "{reg:?}"
    );
    assert_eq!(reg.most_registered_range.as_ref().map(|r| r.times), Some(80), "{reg:?}");
    assert!(
        b.explain.findings.iter().any(|f| f.rule == "registration-churn"),
        "{:?}",
        b.explain
    );
    assert!(stdout(&r).contains("[registration-churn]"));
    let pid = a.processes[0].pid;
    assert_eq!(
        b.processes[0].calls.get("io_uring_register:register-buffers"),
        Some(&80),
        "pid {pid}"
    );
    assert!(stdout(&r).contains("@io_uring_register:register-buffers[host-only] latency (ns):"));

    // A cut-off recording: one line, exit 2.
    let cut = dir.join("cut.rec");
    let half: Vec<&str> = text.lines().take(text.lines().count() / 2).collect();
    std::fs::write(&cut, half.join("\n")).unwrap();
    let c = run(&["replay", cut.to_str().unwrap()]);
    assert_eq!(c.status.code(), Some(2));
    let err = stderr(&c);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("truncated"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
