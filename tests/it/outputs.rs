//! What `run` writes where, as a user pipes it. What is proven:
//! - `run --format json -- CMD`: standard output is the report alone, one
//!   JSON document (`| jq` works), whatever the command prints; the
//!   command's standard output goes to standard error; with the text report
//!   the command keeps standard output;
//! - `run --record X.gz`: the recording is gzip, and replays to the live
//!   report;
//! - `run`'s text report: the first line after its header is a verdict
//!   line (what a reader looks for first);
//! - `attach` says of each library of the probe table that no attached
//!   process maps what `doctor` says: installed (the same files) or not.
use integration_tests::{can_trace, parse_report, path_str as s, read_report, run, stderr, stdout};

const MARK: &str = "command-stdout-4d1c";

#[test]
fn run_format_json_keeps_the_commands_stdout_out_of_the_document() {
    if !can_trace("run_format_json_keeps_the_commands_stdout_out_of_the_document") {
        return;
    }
    let o = run(&["run", "--format", "json", "--", "sh", "-c", &format!("echo {MARK}")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        !out.lines().any(|l| l == MARK),
        "the command's line is not in the document:\n{out}"
    );
    let r = parse_report("run --format json's stdout", &out);
    assert_eq!(r.schema, "gdrtrace.report/v1");
    assert!(
        stderr(&o).lines().any(|l| l == MARK),
        "the command's stdout went to stderr:\n{}",
        stderr(&o)
    );
    // The text report leaves the command's stdout where it was.
    let o = run(&["run", "--", "sh", "-c", &format!("echo {MARK}")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).lines().next() == Some(MARK), "{}", stdout(&o));
    assert!(!stderr(&o).contains(MARK), "{}", stderr(&o));
}

#[test]
fn run_record_gz_writes_gzip_that_replays() {
    if !can_trace("run_record_gz_writes_gzip_that_replays") {
        return;
    }
    let dir = integration_tests::scratch("record-gz");
    let (rec, live, replayed) = (dir.join("run.rec.gz"), dir.join("live.json"), dir.join("replayed.json"));
    let o = run(&["run", "--record", s(&rec), "--json", s(&live), "--", "true"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let bytes = std::fs::read(&rec).expect("the recording");
    assert_eq!(&bytes[..2], &[0x1f, 0x8b], "gzip magic");
    let o = run(&["replay", s(&rec), "--json", s(&replayed)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (a, b) = (read_report(&live), read_report(&replayed));
    assert_eq!(a.command, b.command);
    assert_eq!(a.processes.len(), b.processes.len());
}

#[test]
fn attach_says_of_unmapped_libraries_what_doctor_says() {
    if !can_trace("attach_says_of_unmapped_libraries_what_doctor_says") {
        return;
    }
    let o = run(&["doctor", "--format", "json"]);
    let doctor: gdrtrace::cmd::doctor::Doctor = integration_tests::parse_as("doctor's JSON", &stdout(&o));
    // A process that maps none of the table's libraries.
    let mut sleeper = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
    let dir = integration_tests::scratch("attach-libs");
    let json = dir.join("attach.json");
    let o = run(&[
        "attach",
        "--pid",
        &sleeper.id().to_string(),
        "--duration",
        "1s",
        "--json",
        s(&json),
    ]);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(o.status.success(), "{}", stderr(&o));
    let r = read_report(&json);
    let text = stdout(&o);
    let mut libraries = 0;
    for p in doctor.probe_points.iter().filter(|p| p.target.starts_with("lib")) {
        let row = r
            .coverage
            .iter()
            .find(|c| c.point == p.point)
            .unwrap_or_else(|| panic!("{} in the coverage", p.point));
        let reason = row.reason.as_deref().unwrap_or_else(|| panic!("{row:?} has no reason"));
        let installed = !p.found_in.starts_with("not installed");
        if installed {
            assert_eq!(reason, gdrtrace::probes::planner::INSTALLED_NOT_MAPPED, "{}", p.point);
            for d in &row.detail {
                let path = d.strip_prefix("installed: ").expect("an installed file");
                assert!(p.found_in.contains(path), "doctor lists {path}: {}", p.found_in);
            }
            assert!(!row.detail.is_empty(), "{row:?}");
        } else {
            assert_eq!(reason, gdrtrace::probes::planner::NOT_INSTALLED, "{}", p.point);
        }
        libraries += 1;
    }
    assert!(libraries >= 4, "the table's libraries: {libraries}");
    assert!(!text.contains("neither installed nor mapped"), "{text}");
}

#[test]
fn run_text_report_begins_with_the_verdict() {
    if !can_trace("run_text_report_begins_with_the_verdict") {
        return;
    }
    // Quiet: the report alone on standard output.
    let o = run(&["run", "--", "true"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let mut lines = out.lines().skip_while(|l| !l.starts_with("gdrtrace report ("));
    assert!(lines.next().is_some(), "a header:\n{out}");
    let first = lines.next().unwrap_or_default();
    assert!(
        first.starts_with("verdict: "),
        "the line after the header: {first:?}\n{out}"
    );
}
