//! Issue 28: trust boundaries. An output never clobbers an input, every
//! output (streamed ones too) survives a failing disk in a fallback file
//! that no planted symlink can redirect, names from traced processes cannot
//! drive the terminal, and impossible inputs or requests are refused. Each
//! test failed on the main branch before the fix. Tests that load BPF say
//! `skipping: <reason>` without the privilege (and fail under CI). Time
//! limits here only catch hangs; no test asserts a duration.
use std::{
    os::unix::{ffi::OsStrExt as _, fs::PermissionsExt as _},
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use gdrtrace::{compare::Baseline, trace::IntervalRecord};
use integration_tests::{
    assert_one_line, can_trace, fixture, gdrtrace, gdrtrace_path, parse_as, parse_report, path_str as s, read_as,
    read_json, read_report, report_of, run_bounded, stderr, stdout, to_json, write_as,
};

fn scratch(name: &str) -> PathBuf {
    integration_tests::scratch(&format!("trust-{name}"))
}

/// Runs `cmd` (90 s at most: a hang is a failure).
fn bounded_cmd(cmd: &mut Command) -> Output {
    let (o, killed) = run_bounded(cmd, Duration::from_secs(90));
    assert!(!killed, "{cmd:?} hung");
    o
}

fn bounded(args: &[&str]) -> Output {
    bounded_cmd(gdrtrace().args(args))
}

/// The fallback file a message names (`written to PATH instead`).
fn fallback_of(err: &str) -> PathBuf {
    let spare = err
        .split("written to ")
        .nth(1)
        .and_then(|r| r.split(" instead").next())
        .unwrap_or_else(|| panic!("no fallback named: {err}"));
    PathBuf::from(spare)
}

fn copy_fixture(dir: &Path, rel: &str, name: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::copy(fixture(rel), &p).expect("copying a fixture");
    p
}

/// An output that names an input (by name, by symlink, by hard
/// link) or another output is refused before anything is read or run, with
/// one line naming both flags, and the input is left as it was.
#[test]
fn an_output_never_overwrites_an_input() {
    let dir = scratch("same-file");
    let rec = copy_fixture(&dir, "recordings/pin-churn.rec", "job.rec");
    let report = copy_fixture(&dir, "reports/pin-churn.json", "r.json");
    let log = copy_fixture(&dir, "logs/nccl-auto.log", "l.log");
    let base = dir.join("base.json");
    let o = bounded(&["baseline", "record", "--from", s(&report), "--out", s(&base)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let cur = dir.join("cur.json");
    std::fs::copy(&base, &cur).expect("copy");
    let link = dir.join("link.rec");
    std::os::unix::fs::symlink(&rec, &link).expect("symlink");
    let hard = dir.join("hard.rec");
    std::fs::hard_link(&rec, &hard).expect("hard link");
    let marker = dir.join("ran");
    let new = dir.join("new.out");
    let before: Vec<(PathBuf, Vec<u8>)> = [&rec, &report, &log, &base, &cur]
        .iter()
        .map(|p| (p.to_path_buf(), std::fs::read(p).expect("input")))
        .collect();
    let cases: Vec<(Vec<&str>, [&str; 2])> = vec![
        (vec!["replay", s(&rec), "--json", s(&rec)], ["RECORDING", "--json"]),
        (
            vec!["replay", s(&rec), "--transfers", s(&rec)],
            ["RECORDING", "--transfers"],
        ),
        (vec!["replay", s(&rec), "--json", s(&link)], ["RECORDING", "--json"]),
        (vec!["replay", s(&rec), "--json", s(&hard)], ["RECORDING", "--json"]),
        (
            vec!["replay", s(&rec), "--json", s(&log), "--nccl-log", s(&log)],
            ["--nccl-log", "--json"],
        ),
        (
            vec!["replay", s(&rec), "--json", s(&new), "--transfers", s(&new)],
            ["--json", "--transfers"],
        ),
        (
            vec!["compare", s(&base), s(&cur), "--html", s(&base)],
            ["BASELINE", "--html"],
        ),
        (
            vec!["compare", s(&base), s(&cur), "--html", s(&cur)],
            ["CURRENT", "--html"],
        ),
        (
            vec!["baseline", "record", "--from", s(&report), "--out", s(&report)],
            ["--from", "--out"],
        ),
        (
            vec!["run", "--json", s(&new), "--record", s(&new), "--", "touch", s(&marker)],
            ["--json", "--record"],
        ),
        (
            vec![
                "run",
                "--json",
                s(&log),
                "--nccl-log",
                s(&log),
                "--",
                "touch",
                s(&marker),
            ],
            ["--nccl-log", "--json"],
        ),
        (
            vec!["attach", "--pid", "1", "--jsonl", s(&new), "--json", s(&new)],
            ["--json", "--jsonl"],
        ),
    ];
    for (args, flags) in &cases {
        let o = bounded(args);
        assert_one_line(&o, 2, &[flags[0], flags[1], "same file"], &args.join(" "));
        assert!(!marker.exists(), "{args:?}: the command ran");
        assert!(!new.exists(), "{args:?}: an output was created");
        for (p, bytes) in &before {
            assert_eq!(
                &std::fs::read(p).expect("input"),
                bytes,
                "{args:?} changed {}",
                p.display()
            );
        }
    }
    // Special files may be named twice (`--json /dev/null --transfers /dev/null`).
    let o = bounded(&["replay", s(&rec), "--json", "/dev/null", "--transfers", "/dev/null"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Mounts a tmpfs of `size` at `dir`; None (with the reason) where mounting
/// is not permitted.
fn tiny_tmpfs(dir: &Path, size: &str) -> Option<TmpFs> {
    std::fs::create_dir_all(dir).expect("mount point");
    let o = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .output()
        .ok()?;
    if !o.status.success() {
        println!(
            "skipping: the tmpfs cases: mount -t tmpfs failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
        return None;
    }
    Some(TmpFs(dir.to_path_buf()))
}

struct TmpFs(PathBuf);

impl Drop for TmpFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A streamed output (`--transfers`, `--record`, `--jsonl`) that
/// fails mid-stream or at once moves what it wrote plus the rest to the
/// fallback file: byte for byte what a good disk would have held.
#[test]
fn streamed_outputs_fall_back_whole() {
    let dir = scratch("streams");
    let rec = fixture("recordings/gpu-h200-nccl-auto.rec.gz");
    let good = dir.join("good.jsonl");
    let o = bounded(&["replay", &rec, "--transfers", s(&good)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let want = std::fs::read(&good).expect("transfers");
    assert!(!want.is_empty(), "the fixture has transfer records");
    // At once: /dev/full takes nothing.
    let o = bounded(&["replay", &rec, "--transfers", "/dev/full"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("--transfers /dev/full: ENOSPC"), "{err}");
    let spare = fallback_of(&err);
    assert_eq!(
        std::fs::read(&spare).expect("fallback"),
        want,
        "the fallback holds every record"
    );
    let _ = std::fs::remove_file(&spare);
    // Mid-stream: a tmpfs with less room than the records need.
    if let Some(fs) = tiny_tmpfs(&dir.join("small"), "64k") {
        let filler = fs.0.join("filler");
        let room: usize = 64 * 1024 - 4096;
        let fill = room.saturating_sub(want.len() / 2);
        std::fs::write(&filler, vec![b'x'; fill]).expect("filler");
        let out = fs.0.join("t.jsonl");
        let o = bounded(&["replay", &rec, "--transfers", s(&out)]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(stdout(&o).contains("gdrtrace report"), "the report was printed");
        assert!(err.contains(&format!("--transfers {}", out.display())), "{err}");
        let spare = fallback_of(&err);
        assert_eq!(
            std::fs::read(&spare).expect("fallback"),
            want,
            "the part written before the disk filled and the rest, in order"
        );
        let _ = std::fs::remove_file(&spare);
    }
    if !can_trace("streamed_outputs_fall_back_whole (run --record, attach --jsonl)") {
        return;
    }
    // --record /dev/full: the whole recording is in the fallback, and it replays.
    let o = bounded(&["run", "--record", "/dev/full", "--", "true"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(stdout(&o).contains("gdrtrace report"), "the report was printed");
    assert!(err.contains("--record /dev/full: ENOSPC"), "{err}");
    let spare = fallback_of(&err);
    let o = bounded(&["replay", s(&spare)]);
    assert!(o.status.success(), "the fallback recording replays: {}", stderr(&o));
    let _ = std::fs::remove_file(&spare);
    // A command with transfer records (pinned batches): `true` has none.
    let o = bounded(&[
        "run",
        "--transfers",
        "/dev/full",
        "--",
        s(&gdrtrace_path()),
        "drive",
        "pin-churn",
        "--iterations",
        "5",
        "--odirect-mib",
        "0",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("--transfers /dev/full"), "{err}");
    let _ = std::fs::remove_file(fallback_of(&err));
    // --record and --json on a tmpfs the recording fills: both fall back.
    if let Some(fs) = tiny_tmpfs(&dir.join("small2"), "64k") {
        let r = fs.0.join("r.rec");
        let j = fs.0.join("r.json");
        let o = bounded(&[
            "run",
            "--record",
            s(&r),
            "--json",
            s(&j),
            "--",
            s(&gdrtrace_path()),
            "drive",
            "pin-churn",
            "--iterations",
            "2000",
            "--odirect-mib",
            "0",
        ]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        let rec_line = err
            .lines()
            .find(|l| l.contains("--record"))
            .unwrap_or_else(|| panic!("--record not reported: {err}"));
        let spare = fallback_of(rec_line);
        let o = bounded(&["replay", s(&spare)]);
        assert!(o.status.success(), "the fallback recording replays: {}", stderr(&o));
        assert!(
            std::fs::read_to_string(&spare)
                .expect("fallback")
                .contains("\"type\":\"footer\""),
            "the footer is in the fallback"
        );
        assert!(
            err.contains(&format!("--json {}", j.display())),
            "--json fell back too: {err}"
        );
        let _ = std::fs::remove_file(fallback_of(err.lines().find(|l| l.contains("--json")).expect("--json")));
        let _ = std::fs::remove_file(&spare);
    }
    // attach --jsonl /dev/full: every interval record in the fallback;
    // --record /dev/full: the recording, with the workloads line attach
    // appends after the footer.
    let mut target = Command::new("sleep").arg("120").spawn().expect("sleep");
    let o = bounded(&[
        "attach",
        "--pid",
        &target.id().to_string(),
        "--interval",
        "300ms",
        "--duration",
        "2s",
        "--jsonl",
        "/dev/full",
        "--record",
        "/dev/full",
    ]);
    let _ = target.kill();
    let _ = target.wait();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("--jsonl"))
        .unwrap_or_else(|| panic!("{err}"));
    let spare = fallback_of(line);
    let text = std::fs::read_to_string(&spare).expect("fallback");
    let printed = stdout(&o).lines().filter(|l| l.starts_with('[')).count();
    assert_eq!(text.lines().count(), printed, "one record per printed interval line");
    for l in text.lines() {
        let _: IntervalRecord = parse_as("a --jsonl line", l);
    }
    let _ = std::fs::remove_file(&spare);
    let line = err
        .lines()
        .find(|l| l.contains("--record"))
        .unwrap_or_else(|| panic!("{err}"));
    let spare = fallback_of(line);
    let text = std::fs::read_to_string(&spare).expect("fallback");
    assert!(
        text.lines()
            .last()
            .is_some_and(|l| l.contains("\"type\":\"workloads\"")),
        "the workloads line followed the footer into the fallback"
    );
    let o = bounded(&["replay", s(&spare)]);
    assert!(o.status.success(), "the fallback recording replays: {}", stderr(&o));
    let _ = std::fs::remove_file(&spare);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A failed output keeps the report on stdout and the other
/// outputs, and names its flag and path, never the input.
#[test]
fn a_failed_output_keeps_the_report_and_the_other_outputs() {
    let dir = scratch("others");
    let rec = fixture("recordings/gpu-h200-nccl-auto.rec.gz");
    let json = dir.join("ok.json");
    let o = bounded(&["replay", &rec, "--json", s(&json), "--transfers", "/dev/full"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        stdout(&o).contains("gdrtrace report (gdrtrace.report/v1)"),
        "report hidden"
    );
    assert!(err.contains("--transfers /dev/full"), "{err}");
    assert!(!err.contains(&format!("{rec}:")), "the input is blamed: {err}");
    assert_eq!(read_report(&json).schema, "gdrtrace.report/v1");
    let _ = std::fs::remove_file(fallback_of(&err));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The fallback file is created fresh (O_EXCL|O_NOFOLLOW) in a
/// private directory with a random name: a symlink planted at the old
/// predictable name (`$TMPDIR/gdrtrace-PID-NAME`) is not followed.
#[test]
fn the_fallback_file_follows_no_planted_symlink() {
    let dir = scratch("symlink");
    let victim = dir.join("victim");
    std::fs::write(&victim, b"precious").expect("victim");
    // `exec` keeps the shell's pid: the link is planted at the very name
    // the old code would have opened.
    let script = format!(
        "ln -s {} \"$TMPDIR/gdrtrace-$$-full\" && exec {} replay {} --json /dev/full",
        s(&victim),
        s(&gdrtrace_path()),
        fixture("recordings/pin-churn.rec")
    );
    let o = bounded_cmd(Command::new("sh").args(["-c", &script]).env("TMPDIR", &dir));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(
        std::fs::read(&victim).expect("victim"),
        b"precious",
        "the symlink was followed"
    );
    let spare = fallback_of(&err);
    assert!(
        spare.starts_with(&dir),
        "the fallback is under $TMPDIR: {}",
        spare.display()
    );
    let meta = std::fs::symlink_metadata(&spare).expect("fallback");
    assert!(meta.is_file(), "a regular file, not a link");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let parent = spare.parent().expect("its directory");
    assert_ne!(parent, dir, "in a directory of its own");
    assert_eq!(
        std::fs::metadata(parent).expect("dir").permissions().mode() & 0o777,
        0o700
    );
    assert_eq!(read_report(&spare).schema, "gdrtrace.report/v1");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A hostile process name: retitles the terminal, clears the screen.
const HOSTILE: &str = "e\u{1b}]0;PWN\u{7}\u{1b}[2J";

fn assert_escaped(text: &str, what: &str) {
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "{what}: raw escape printed"
    );
    assert!(
        text.contains("e\\x1b]0;PWN\\x07\\x1b[2J"),
        "{what}: the name is not shown escaped:\n{text}"
    );
}

/// Names from traced processes (and paths, arguments) are printed
/// escaped, in every text output; JSON files keep the raw value.
#[test]
fn names_from_traced_processes_are_escaped() {
    let dir = scratch("escapes");
    // A recording whose process is named HOSTILE, replayed and explained.
    let text = std::fs::read_to_string(fixture("recordings/pin-churn.rec")).expect("fixture");
    let json_name = serde_json::to_string(HOSTILE).expect("JSON string");
    let rec = dir.join("hostile.rec");
    std::fs::write(&rec, text.replace("\"gdrtrace\"", &json_name)).expect("recording");
    let json = dir.join("r.json");
    let o = bounded(&["replay", s(&rec), "--json", s(&json)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_escaped(&stdout(&o), "replay");
    assert_eq!(read_report(&json).processes[0].comm, HOSTILE, "JSON keeps the raw name");
    let o = bounded(&["replay", s(&rec), "--format", "json"]);
    let printed = parse_report("stdout JSON stays valid", &stdout(&o));
    assert_eq!(printed.processes[0].comm, HOSTILE);
    let o = bounded(&["explain", s(&rec)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stdout(&o).contains('\u{1b}'), "explain printed a raw escape");
    // A file named so, in an error message.
    let named = dir.join(HOSTILE);
    std::fs::write(&named, b"").expect("file");
    let o = bounded(&["explain", s(&named)]);
    assert_eq!(o.status.code(), Some(2));
    assert_escaped(&stderr(&o), "an error naming the file");
    if !can_trace("names_from_traced_processes_are_escaped (a live process)") {
        return;
    }
    // A live process whose executable (so its comm) is named HOSTILE.
    let exe = dir.join(HOSTILE);
    std::fs::copy("/bin/sleep", &exe).expect("copy sleep");
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut target = Command::new(&exe).arg("60").spawn().expect("the hostile process");
    let o = bounded(&[
        "attach",
        "--pid",
        &target.id().to_string(),
        "--interval",
        "300ms",
        "--duration",
        "1500ms",
    ]);
    let _ = target.kill();
    let _ = target.wait();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_escaped(&stdout(&o), "attach --interval and its report");
    let o = bounded(&["run", "--", s(&exe), "0"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        !stdout(&o).contains('\u{1b}') && !stderr(&o).contains('\u{1b}'),
        "run printed a raw escape"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `attach --cgroup` takes only a directory of a cgroup file
/// system, not any directory holding a file named cgroup.procs.
#[test]
fn attach_cgroup_only_on_a_cgroup_mount() {
    let dir = scratch("cgroup");
    std::fs::write(dir.join("cgroup.procs"), format!("{}\n1\n", std::process::id())).expect("fake");
    let o = bounded(&["attach", "--cgroup", s(&dir), "--duration", "1s"]);
    assert_one_line(&o, 2, &["--cgroup", "not a cgroup directory"], "a fake cgroup");
    let o = bounded(&["attach", "--cgroup", "/etc", "--duration", "1s"]);
    assert_one_line(&o, 2, &["not a cgroup directory"], "/etc");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `compare` never wraps a sum (exit 2, "overflows"), and a
/// baseline with two runs of one name is refused, not half compared.
#[test]
fn compare_never_wraps_and_compares_every_run() {
    let dir = scratch("compare");
    let report = read_report(Path::new(&fixture("reports/pin-churn.json")));
    let base = dir.join("base.json");
    let o = bounded(&[
        "baseline",
        "record",
        "--from",
        &fixture("reports/pin-churn.json"),
        "--out",
        s(&base),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // 201 + (2^64 - 1) registrations across two processes.
    let mut cur = report.clone();
    let mut p = cur.processes[0].clone();
    cur.processes[0].registrations = 201;
    p.pid = 999_999;
    p.registrations = u64::MAX;
    cur.processes.push(p);
    let cur_path = dir.join("cur.json");
    write_as(&cur_path, &cur);
    let o = bounded(&["compare", s(&base), s(&cur_path)]);
    assert_one_line(&o, 2, &["could not compare", "overflows"], "registrations that wrap");
    // Two runs named pin-churn, the second with 5x the registrations.
    let mut b: Baseline = read_as(&base);
    let mut second = b.runs[0].clone();
    let mut r = report_of("the baseline's run", &second.report);
    for p in &mut r.processes {
        p.registrations *= 5;
    }
    second.report = to_json(&r);
    b.runs.push(second);
    let twice = dir.join("twice.json");
    write_as(&twice, &b);
    let o = bounded(&["compare", s(&base), s(&twice)]);
    assert_one_line(&o, 2, &["are both named"], "two runs of one name (current)");
    let o = bounded(&["compare", s(&twice), s(&base)]);
    assert_one_line(&o, 2, &["are both named"], "two runs of one name (baseline)");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every section of a report is read typed: a value of the wrong
/// type is exit 2 naming its field, in `compare` (never "no regression"
/// nor "REGRESSION") and in `explain` (never read as something else).
#[test]
fn reports_are_read_typed() {
    let dir = scratch("typed");
    let report = read_json(Path::new(&fixture("reports/pin-churn.json")));
    let base = dir.join("base.json");
    let o = bounded(&[
        "baseline",
        "record",
        "--from",
        &fixture("reports/pin-churn.json"),
        "--out",
        s(&base),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // untyped: values no typed report can hold, written into the raw JSON on purpose.
    type Edit = fn(&mut serde_json::Value);
    let cases: [(&str, Edit, &str); 4] = [
        ("loss [1]", |r| r["loss"] = serde_json::json!([1]), "`loss`"),
        (
            "processes[0].errors \"12\"",
            |r| r["processes"][0]["errors"] = "12".into(),
            "`processes[0]",
        ),
        (
            "kernel_histograms[0].calls \"12\"",
            |r| r["kernel_histograms"][0]["calls"] = "12".into(),
            "`kernel_histograms[0].calls`",
        ),
        (
            "processes[0] a string",
            |r| r["processes"][0] = "x".into(),
            "`processes[0]`",
        ),
    ];
    for (what, edit, field) in cases {
        let mut r = report.clone();
        edit(&mut r);
        let p = dir.join("bad.json");
        std::fs::write(&p, r.to_string()).expect("report");
        let o = bounded(&["compare", s(&base), s(&p)]);
        assert_one_line(&o, 2, &[field], &format!("compare {what}"));
        let o = bounded(&["explain", s(&p)]);
        assert_one_line(&o, 2, &[field], &format!("explain {what}"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `replay` refuses impossible values, naming the field.
#[test]
fn replay_refuses_impossible_values() {
    let dir = scratch("impossible");
    let text = std::fs::read_to_string(fixture("recordings/pin-churn.rec")).expect("fixture");
    // untyped: values no typed recording can hold, written into its raw lines on purpose.
    let edit = |f: &dyn Fn(&mut serde_json::Value) -> bool| -> String {
        let mut done = false;
        let lines: Vec<String> = text
            .lines()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).expect("JSON line");
                if !done && f(&mut v) {
                    done = true;
                }
                v.to_string()
            })
            .collect();
        assert!(done, "no line edited");
        lines.join("\n") + "\n"
    };
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "duration_s -1",
            edit(&|v| {
                (v["type"] == "footer")
                    .then(|| v["duration_s"] = serde_json::json!(-1))
                    .is_some()
            }),
            "duration_s is -1",
        ),
        (
            "negative CPU seconds",
            edit(&|v| {
                (v["type"] == "sample")
                    .then(|| v["cpu_seconds"] = serde_json::json!(-2.5))
                    .is_some()
            }),
            "cpu_seconds is -2.5",
        ),
        (
            "negative duration of a call",
            edit(&|v| {
                (v["type"] == "event" && v["dur_ns"].as_u64().is_some_and(|d| d > 0))
                    .then(|| v["dur_ns"] = serde_json::json!(-5))
                    .is_some()
            }),
            "dur_ns: -5 is not a non-negative integer",
        ),
        (
            "negative start",
            edit(&|v| {
                (v["type"] == "event")
                    .then(|| v["start_ns"] = serde_json::json!("-7"))
                    .is_some()
            }),
            "start_ns: \"-7\" is not a non-negative integer",
        ),
    ];
    for (what, body, expect) in &cases {
        let p = dir.join("bad.rec");
        std::fs::write(&p, body).expect("recording");
        let o = bounded(&["replay", s(&p), "--json", s(&dir.join("out.json"))]);
        assert_one_line(&o, 2, &[expect], what);
        assert!(!dir.join("out.json").exists(), "{what}: a report was written");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs gdrtrace with `args` under an address-space limit of `bytes`
/// (RLIMIT_AS), as `ulimit -v` would.
fn under_address_limit(bytes: u64, args: &[&str]) -> Output {
    use std::os::unix::process::CommandExt as _;
    let mut cmd = gdrtrace();
    cmd.args(args);
    // SAFETY: setrlimit is async-signal-safe; the closure touches nothing else.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    bounded_cmd(&mut cmd)
}

/// A small gzip that expands to a JSON document larger than the
/// memory its parse would take is one line and exit 2, never an allocation
/// abort (exit 134 and a backtrace); a real report still reads under the
/// same limit.
#[test]
fn memory_is_bounded_by_the_input() {
    let dir = scratch("memory");
    let bomb = dir.join("bomb.json.gz");
    // 320 MiB of JSON (an array of ones), a few hundred KiB of gzip: parsed
    // into a tree it would take ~5 GiB. A report's `workloads` are JSON
    // values, so the typed reader (explain) builds them too.
    {
        let file = std::fs::File::create(&bomb).expect("bomb file");
        let mut gz = Command::new("gzip")
            .args(["-1", "-c"])
            .stdin(Stdio::piped())
            .stdout(file)
            .spawn()
            .expect("gzip");
        let mut w = gz.stdin.take().expect("gzip stdin");
        use std::io::Write as _;
        w.write_all(br#"{"schema":"gdrtrace.report/v1","workloads":["#)
            .expect("write");
        let chunk = "1,".repeat(1 << 20);
        for _ in 0..160 {
            w.write_all(chunk.as_bytes()).expect("write");
        }
        w.write_all(b"1]}").expect("write");
        drop(w);
        assert!(gz.wait().expect("gzip").success());
    }
    let gz_size = std::fs::metadata(&bomb).expect("bomb").len();
    assert!(gz_size < 4 << 20, "the bomb is {gz_size} bytes of gzip");
    let limit = 2u64 << 30;
    let report = PathBuf::from(fixture("reports/cuda-copy.json"));
    let baseline = PathBuf::from(fixture("baselines/vm-6.1.json"));
    for args in [
        vec!["explain", s(&bomb)],
        vec!["compare", s(&baseline), s(&bomb)],
        vec!["compare", s(&bomb), s(&report)],
    ] {
        let o = under_address_limit(limit, &args);
        assert_one_line(&o, 2, &["bomb.json.gz", "memory", "RLIMIT_AS"], &args.join(" "));
    }
    // The same limit reads a real report and baseline.
    let o = under_address_limit(limit, &["explain", s(&report)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = under_address_limit(
        limit,
        &[
            "compare",
            s(&baseline),
            s(&PathBuf::from(fixture("baselines/vm-6.12.json"))),
            "--allow-profile-change",
        ],
    );
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `drive pin-churn` refuses a request the kernel or the machine
/// cannot hold (exit 2), before allocating anything.
#[test]
fn pin_churn_refuses_what_the_machine_cannot_hold() {
    for (args, expect) in [
        (vec!["--buffers", "4294967295"], "at most 16384 buffers"),
        (vec!["--buffers", "16384", "--pages", "4294967295"], "per buffer"),
        (vec!["--buffers", "16384", "--pages", "262144"], "MemAvailable"),
    ] {
        let mut a = vec!["drive", "pin-churn", "--iterations", "1", "--odirect-mib", "0"];
        a.extend(args.iter().copied());
        let o = bounded(&a);
        assert_one_line(&o, 2, &[expect], &a.join(" "));
    }
}

/// Processes whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == needle.as_bytes()))
        })
        .collect()
}

/// `run --duration`'s SIGKILL, 10 s after SIGTERM, reaches a
/// grandchild that ignores SIGTERM even though the command itself exited
/// at SIGTERM (the test takes about 12 s).
#[test]
fn the_kill_window_reaches_a_grandchild() {
    if !can_trace("the_kill_window_reaches_a_grandchild") {
        return;
    }
    // A number no other process has on its command line.
    let tag = format!("31.{}", std::process::id());
    let script = format!("(trap '' TERM; exec sleep {tag}) & sleep 32");
    let o = bounded(&["run", "--duration", "1s", "--", "sh", "-c", &script]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(143), "the command's own status: {err}");
    assert!(err.contains("sent SIGKILL"), "{err}");
    // SIGKILL is delivered before gdrtrace exits; give the kernel a moment.
    let until = Instant::now() + Duration::from_secs(5);
    while !processes_with(&tag).is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = processes_with(&tag);
    for pid in &left {
        // SAFETY: a leftover of this test.
        unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
    }
    assert!(left.is_empty(), "the grandchild outlived the kill window: {left:?}");
}

/// The smaller items of the issue.
#[test]
fn smaller_items() {
    let dir = scratch("smaller");
    // A #! interpreter that does not exist: 126, before any BPF is loaded.
    let script = dir.join("script");
    std::fs::write(&script, "#!/nonexistent/interp\nexit 0\n").expect("script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let o = bounded(&["run", "--", s(&script)]);
    assert_one_line(&o, 126, &["bad interpreter /nonexistent/interp"], "#!/nonexistent");
    // compare with a full stdout: the output error, exit 2, not "regression".
    let base = fixture("baselines/vm-6.1.json");
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full")
    };
    // (`output()` keeps the stdout given; run_bounded would pipe it.)
    let o = gdrtrace()
        .args(["compare", &base, &base])
        .stdout(full())
        .output()
        .expect("compare");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("writing to standard output"), "{}", stderr(&o));
    let o = gdrtrace().arg("--help").stdout(full()).output().expect("--help");
    assert_ne!(o.status.code(), Some(0), "--help >/dev/full");
    // An empty file: one message in every reader.
    let empty = dir.join("empty");
    std::fs::write(&empty, b"").expect("empty");
    for args in [
        vec!["explain", s(&empty)],
        vec!["replay", s(&empty)],
        vec!["compare", &base, s(&empty)],
        vec!["compare", s(&empty), &base],
        vec!["baseline", "record", "--from", s(&empty), "--out", "/dev/null"],
    ] {
        let o = bounded(&args);
        assert_one_line(&o, 2, &[&format!("{} is empty", empty.display())], &args.join(" "));
    }
    // A socket: named as one, not ENXIO.
    let sock = dir.join("sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).expect("socket");
    let rec = fixture("recordings/pin-churn.rec");
    let o = bounded(&["replay", &rec, "--json", s(&sock)]);
    assert_one_line(&o, 2, &["is a socket"], "--json SOCKET");
    let o = bounded(&["explain", s(&sock)]);
    assert_one_line(&o, 2, &["is a socket"], "explain SOCKET");
    // A long line cut in its middle: the reason at its end stays.
    let toml = dir.join("t.toml");
    std::fs::write(
        &toml,
        format!("[defaults]\nbandwith_decrease_pct = \"{}\"\n", "é".repeat(400)),
    )
    .expect("toml");
    let o = bounded(&["compare", &base, &base, "--thresholds", s(&toml)]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("bandwith_decrease_pct") || err.contains("unknown field"),
        "{err}"
    );
    assert!(err.trim_end().len() < 400, "cut: {err}");
    // --comm longer than a comm can be: says so.
    let o = bounded(&["attach", "--comm", "gdrtrace-no-such-command-name"]);
    assert_one_line(&o, 2, &["15 bytes", "try --comm gdrtrace-no-suc"], "a long --comm");
    if !can_trace("smaller_items (non-UTF-8 arguments, --interval 1ms)") {
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    // Arguments that are not UTF-8 reach the command as they are.
    let o = bounded_cmd(
        gdrtrace()
            .arg("run")
            .arg("--")
            .arg("printf")
            .arg(std::ffi::OsStr::from_bytes(b"x\xffy")),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(o.stdout.starts_with(b"x\xffy"), "the argument's bytes");
    // --interval under the tick: said, not silently raised.
    let mut target = Command::new("sleep")
        .arg("60")
        .stdout(Stdio::null())
        .spawn()
        .expect("sleep");
    let o = bounded(&[
        "attach",
        "--pid",
        &target.id().to_string(),
        "--interval",
        "1ms",
        "--duration",
        "1s",
    ]);
    let _ = target.kill();
    let _ = target.wait();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--interval 1ms raised to 250ms: the smallest interval"),
        "{}",
        stderr(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
