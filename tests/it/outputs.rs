//! What `run` writes where, as a user pipes it. What is proven:
//! - `run --format json -- CMD`: standard output is the report alone, one
//!   JSON document (`| jq` works), whatever the command prints; the
//!   command's standard output goes to standard error; with the text report
//!   the command keeps standard output;
//! - `run --record X.gz`: the recording is gzip, and replays to the live
//!   report.
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
