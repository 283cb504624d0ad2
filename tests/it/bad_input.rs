//! Bad input gets one clear line on stderr and its exit code (2 for usage
//! and input, 126/127 for a command that cannot run), never a panic or a
//! backtrace: every case of the rule in one table. Tests that check more
//! than the one line (an output left unwritten, a fallback file) stay with
//! their area.
use std::{path::Path, process::Command, time::Duration};

use gdrtrace::compare::Baseline;
use integration_tests::{
    assert_one_line, fixture, gdrtrace, path_str as s, read_as, report_of, run, run_bounded, stderr, to_json, write_as,
};

/// (case, args, exit code, a fragment of the line). In args, `{dir}` is the
/// test's scratch directory (its files made by [`bad_files`]) and `{fx}` the
/// fixtures directory.
const CASES: &[(&str, &[&str], i32, &str)] = &[
    // Usage.
    (
        "unknown subcommand",
        &["frobnicate"],
        2,
        "unrecognized subcommand 'frobnicate'",
    ),
    (
        "unknown flag",
        &["doctor", "--bogus"],
        2,
        "unexpected argument '--bogus'",
    ),
    (
        "unknown flag before the command",
        &["run", "--bogus", "--", "true"],
        2,
        "unexpected argument '--bogus'",
    ),
    ("run without a command", &["run"], 2, "run needs a command after '--'"),
    (
        "missing command",
        &["run", "--", "/nonexistent/gdrtrace-no-such-command"],
        127,
        "command not found",
    ),
    (
        "command not in PATH",
        &["run", "--", "gdrtrace-no-such-command-on-path"],
        127,
        "command not found",
    ),
    (
        "ring buffer not a power of two",
        &["run", "--ringbuf-bytes", "12345", "--", "true"],
        2,
        "must be a power of two",
    ),
    (
        "bad duration",
        &["run", "--duration", "soon", "--", "true"],
        2,
        "invalid duration",
    ),
    (
        "validate without iterations",
        &["validate", "--iterations", "0"],
        2,
        "--iterations",
    ),
    (
        "pin-churn in a missing directory",
        &["drive", "pin-churn", "--iterations", "2", "--dir", "/nonexistent"],
        2,
        "--dir /nonexistent: no such directory",
    ),
    (
        "attach to no such pid",
        &["attach", "--pid", "999999999"],
        2,
        "no such process",
    ),
    ("attach to nothing", &["attach"], 2, "attach needs --pid"),
    ("serve cpu budget 0", &["serve", "--cpu-budget", "0"], 2, "--cpu-budget"),
    (
        "serve max targets 0",
        &["serve", "--max-targets", "0"],
        2,
        "--max-targets",
    ),
    (
        "serve ring buffer 1000",
        &["serve", "--ringbuf-bytes", "1000"],
        2,
        "ring buffer size",
    ),
    ("serve listen", &["serve", "--listen", "not-an-address"], 2, "--listen"),
    (
        "serve retention",
        &["serve", "--exited-retention", "soon"],
        2,
        "duration",
    ),
    // Huge durations and sizes.
    (
        "run duration overflow",
        &["run", "--duration", "99999999999999999h", "--", "true"],
        2,
        "invalid value",
    ),
    (
        "attach interval overflow",
        &["attach", "--all", "--interval", "1e400s"],
        2,
        "invalid value",
    ),
    (
        "attach duration too long",
        &["attach", "--all", "--duration", "400d"],
        2,
        "invalid value",
    ),
    (
        "input size overflow",
        &["explain", "x", "--max-input-size", "99999999999999999999G"],
        2,
        "invalid value",
    ),
    (
        "drive duration overflow",
        &["drive", "nccl", "--duration", "99999999999999999999999999s"],
        2,
        "invalid value",
    ),
    // Inputs that are no file, or too big: refused at once by every reader.
    ("explain a device", &["explain", "/dev/zero"], 2, "character device"),
    ("replay a device", &["replay", "/dev/zero"], 2, "character device"),
    (
        "compare with a device",
        &["compare", "{fx}/baselines/vm-6.1.json", "/dev/zero"],
        2,
        "character device",
    ),
    (
        "baseline from a device",
        &["baseline", "record", "--from", "/dev/zero", "--out", "/dev/null"],
        2,
        "character device",
    ),
    (
        "NCCL log a device",
        &["explain", "{fx}/reports/pin-churn.json", "--nccl-log", "/dev/zero"],
        2,
        "character device",
    ),
    ("explain a FIFO", &["explain", "{dir}/fifo"], 2, "is a FIFO"),
    ("replay a FIFO", &["replay", "{dir}/fifo"], 2, "is a FIFO"),
    (
        "compare with a FIFO",
        &["compare", "{fx}/baselines/vm-6.1.json", "{dir}/fifo"],
        2,
        "is a FIFO",
    ),
    (
        "baseline from a FIFO",
        &["baseline", "record", "--from", "{dir}/fifo", "--out", "/dev/null"],
        2,
        "is a FIFO",
    ),
    (
        "NCCL log a FIFO",
        &["explain", "{fx}/reports/pin-churn.json", "--nccl-log", "{dir}/fifo"],
        2,
        "is a FIFO",
    ),
    ("explain a sparse file", &["explain", "{dir}/sparse"], 2, "NUL bytes"),
    ("replay a sparse file", &["replay", "{dir}/sparse"], 2, "NUL bytes"),
    (
        "compare with a sparse file",
        &["compare", "{fx}/baselines/vm-6.1.json", "{dir}/sparse"],
        2,
        "NUL bytes",
    ),
    (
        "baseline from a sparse file",
        &["baseline", "record", "--from", "{dir}/sparse", "--out", "/dev/null"],
        2,
        "NUL bytes",
    ),
    (
        "NCCL log a sparse file",
        &["explain", "{fx}/reports/pin-churn.json", "--nccl-log", "{dir}/sparse"],
        2,
        "NUL bytes",
    ),
    ("explain a directory", &["explain", "{dir}"], 2, "is a directory"),
    ("replay a directory", &["replay", "{dir}"], 2, "is a directory"),
    (
        "compare with a directory",
        &["compare", "{fx}/baselines/vm-6.1.json", "{dir}"],
        2,
        "is a directory",
    ),
    (
        "baseline from a directory",
        &["baseline", "record", "--from", "{dir}", "--out", "/dev/null"],
        2,
        "is a directory",
    ),
    (
        "NCCL log a directory",
        &["explain", "{fx}/reports/pin-churn.json", "--nccl-log", "{dir}"],
        2,
        "is a directory",
    ),
    (
        "replay over the size limit",
        &["replay", "{fx}/recordings/pin-churn.rec", "--max-input-size", "4K"],
        2,
        "over the input size limit of 4 KiB",
    ),
    // Counted after decompression: a small gzip that inflates past the limit.
    (
        "gzip over the size limit",
        &[
            "explain",
            "{fx}/recordings/gpu-h200-nccl-auto.rec.gz",
            "--max-input-size",
            "1M",
        ],
        2,
        "over the input size limit of 1 MiB",
    ),
    // Unreadable reports and recordings: exit 2 in every command.
    (
        "explain a cut report",
        &["explain", "{dir}/cut.json"],
        2,
        "is truncated",
    ),
    ("explain a cut recording", &["explain", "{dir}/cut.rec"], 2, "not JSON"),
    ("replay a cut recording", &["replay", "{dir}/cut.rec"], 2, "not JSON"),
    (
        "replay a report",
        &["replay", "{dir}/cut.json"],
        2,
        "not a gdrtrace recording",
    ),
    (
        "compare cut reports",
        &["compare", "{dir}/cut.json", "{dir}/cut.json"],
        2,
        "is truncated",
    ),
    (
        "baseline from a cut report",
        &["baseline", "record", "--from", "{dir}/cut.json", "--out", "/dev/null"],
        2,
        "is truncated",
    ),
    (
        "explain a missing file",
        &["explain", "/nonexistent/r.json"],
        2,
        "cannot read /nonexistent/r.json",
    ),
    (
        "replay a missing file",
        &["replay", "/nonexistent/r.rec"],
        2,
        "cannot read /nonexistent/r.rec",
    ),
    ("replay a newer recording", &["replay", "{dir}/future.rec"], 2, "newer"),
    (
        "replay a bare report",
        &["replay", "{dir}/report.json"],
        2,
        "not a gdrtrace recording",
    ),
    ("replay an empty file", &["replay", "{dir}/empty.rec"], 2, "empty"),
    ("job of no report", &["job", "{dir}/hello.json"], 2, "has schema null"),
    // Bad baselines.
    (
        "compare a cut baseline",
        &["compare", "{dir}/cut-base.json", "{fx}/reports/pin-churn.json"],
        2,
        "is truncated",
    ),
    (
        "compare an empty baseline",
        &["compare", "{dir}/empty.json", "{fx}/reports/pin-churn.json"],
        2,
        "is empty",
    ),
    (
        "compare YAML",
        &["compare", "{dir}/garbage.json", "{fx}/reports/pin-churn.json"],
        2,
        "is not valid JSON",
    ),
    (
        "compare a newer baseline",
        &["compare", "{dir}/future.json", "{fx}/reports/pin-churn.json"],
        2,
        "newer than this gdrtrace",
    ),
    (
        "compare a baseline without runs",
        &["compare", "{dir}/no-runs.json", "{fx}/reports/pin-churn.json"],
        2,
        "malformed baseline: missing field `runs`",
    ),
    (
        "compare a bad histogram",
        &["compare", "{dir}/bad-hist.json", "{fx}/reports/pin-churn.json"],
        2,
        "histogram does not decode",
    ),
    (
        "compare against a report",
        &["compare", "{fx}/reports/pin-churn.json", "{fx}/reports/pin-churn.json"],
        2,
        "is a report, not a baseline",
    ),
    (
        "compare a cut current",
        &["compare", "{dir}/base.json", "{dir}/cut.json"],
        2,
        "is truncated",
    ),
    (
        "compare a missing current",
        &["compare", "{dir}/base.json", "/nonexistent/current.json"],
        2,
        "cannot read",
    ),
    (
        "thresholds typo",
        &[
            "compare",
            "{dir}/base.json",
            "{fx}/reports/pin-churn.json",
            "--thresholds",
            "{dir}/typo.toml",
        ],
        2,
        "unknown field `latency_p50`",
    ),
    (
        "thresholds for no workload",
        &[
            "compare",
            "{dir}/base.json",
            "{fx}/reports/pin-churn.json",
            "--thresholds",
            "{dir}/nosuch.toml",
        ],
        2,
        "[workloads.nosuch] names no workload",
    ),
];

/// The scratch directory's bad files, each made from a good one.
fn bad_files(dir: &Path) {
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).expect("writing");
    assert!(
        Command::new("mkfifo")
            .arg(dir.join("fifo"))
            .status()
            .expect("mkfifo")
            .success()
    );
    std::fs::File::create(dir.join("sparse"))
        .and_then(|f| f.set_len(1 << 30))
        .expect("sparse file");
    write("cut.json", "{\"schema\": \"gdrtrace.report/v1\", ");
    let rec = std::fs::read_to_string(fixture("recordings/pin-churn.rec")).expect("fixture");
    write("cut.rec", &rec[..rec.len() / 2]);
    write(
        "future.rec",
        "{\"type\":\"header\",\"schema\":\"gdrtrace.recording/v2\"}\n",
    );
    write("report.json", "{\n  \"schema\": \"gdrtrace.report/v1\"\n}\n");
    write("empty.rec", "");
    write("hello.json", "{\"hello\": 1}\n");
    let base = dir.join("base.json");
    let o = run(&[
        "baseline",
        "record",
        "--from",
        &fixture("reports/pin-churn.json"),
        "--out",
        s(&base),
    ]);
    assert!(o.status.success(), "baseline record: {}", stderr(&o));
    let good = std::fs::read_to_string(&base).expect("baseline");
    write("cut-base.json", &good[..good.len() / 2]);
    write("empty.json", "");
    write("garbage.json", "schema: gdrtrace.baseline/v1\n");
    let mut b: Baseline = read_as(&base);
    b.schema = "gdrtrace.baseline/v2".into();
    write_as(&dir.join("future.json"), &b);
    let mut b: serde_json::Value = serde_json::from_str(&good).expect("baseline JSON");
    // A field missing on purpose: the typed baseline cannot be without it.
    b.as_object_mut().expect("an object").remove("runs");
    write("no-runs.json", &b.to_string());
    let mut b: Baseline = read_as(&base);
    let mut r = report_of("the baseline's run", &b.runs[0].report);
    r.operations[0].histogram = Some("not base64!".into());
    b.runs[0].report = to_json(&r);
    write_as(&dir.join("bad-hist.json"), &b);
    write("typo.toml", "[defaults]\nlatency_p50 = 3\n");
    write("nosuch.toml", "[workloads.nosuch]\nbandwidth_decrease_pct = 5\n");
}

#[test]
fn bad_input_gets_one_line_and_its_exit_code() {
    let dir = integration_tests::scratch("bad-input");
    bad_files(&dir);
    let fx = fixture("");
    let fx = fx.trim_end_matches('/');
    for (case, args, code, line) in CASES {
        let args: Vec<String> = args
            .iter()
            .map(|a| a.replace("{dir}", s(&dir)).replace("{fx}", fx))
            .collect();
        // A hang is a failure too.
        let (o, killed) = run_bounded(gdrtrace().args(&args), Duration::from_secs(60));
        assert!(!killed, "{case}: {args:?} hung");
        assert_one_line(&o, *code, &[line], &format!("{case}: {args:?}"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
