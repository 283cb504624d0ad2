//! Issue 49: edges a hostile-input battery left. Each test failed on the
//! main branch before the fix.
//!
//! 1. A recording line that is not JSON, or nested too deep to read, is
//!    damage: every reader of recordings (`replay`, `explain`, `job`) names
//!    it on stderr with its line number, counts it in the report's loss and
//!    exits 2 unless `--skip-damaged`; a well-formed line of an unknown type
//!    is still skipped in silence (a later minor revision's record).
//! 2. `explain` reads a report as it comes, into the typed report: its peak
//!    memory, measured under `ulimit -v`, is within 4 times the input's size.
//! 3. A flag moved to the nearest value the tool supports says so, once, on
//!    stderr: every flag that is moved (`attach` and live `top --interval`,
//!    which share one function, `drive syscalls --threads`, `drive
//!    copy-loop --bytes`, `bench pipeline --wakeup-bytes`).
use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::Duration,
};

use integration_tests::{fixture, gdrtrace, gdrtrace_path, path_str as s, run_bounded, stderr, stdout};
use serde_json::Value;

fn scratch(name: &str) -> PathBuf {
    integration_tests::scratch(&format!("input-limits-{name}"))
}

/// Runs gdrtrace with `args` (120 s at most: a hang is a failure).
fn bounded(args: &[&str]) -> Output {
    let (o, killed) = run_bounded(gdrtrace().args(args), Duration::from_secs(120));
    assert!(!killed, "{args:?} hung");
    o
}

/// How often `needle` is in `text`.
fn count(text: &str, needle: &str) -> usize {
    text.matches(needle).count()
}

/// A recording with `lines` put in before line `at` (1-based) of the
/// pin-churn fixture.
fn recording_with(dir: &Path, name: &str, at: usize, lines: &[String]) -> PathBuf {
    let text = std::fs::read_to_string(fixture("recordings/pin-churn.rec")).expect("fixture");
    let mut out: Vec<String> = text.lines().map(str::to_string).collect();
    for (i, l) in lines.iter().enumerate() {
        out.insert(at - 1 + i, l.clone());
    }
    let p = dir.join(name);
    std::fs::write(&p, out.join("\n") + "\n").expect("recording");
    p
}

/// A line of a type this build does not know holding a 200 KB array nested
/// 100,000 deep (no JSON reader of values takes it: serde_json stops at
/// 128), and one cut short.
fn damaged_lines() -> Vec<String> {
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    vec![
        format!("{{\"type\":\"future-record\",\"v\":{deep}}}"),
        "{\"type\": \"event\", \"kind\": \"call\", \"pid\": ".to_string(),
    ]
}

#[test]
fn item1_damaged_recording_lines_are_said_counted_and_fail() {
    let dir = scratch("damaged");
    let rec = recording_with(&dir, "damaged.rec", 4, &damaged_lines());
    let rec = s(&rec);
    let json = dir.join("replayed.json");
    let o = bounded(&["replay", rec, "--json", s(&json)]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(count(&err, "line 4 is damaged"), 1, "{err}");
    assert!(err.contains("nested deeper"), "{err}");
    assert_eq!(count(&err, "line 5 is damaged"), 1, "{err}");
    assert!(err.contains("--skip-damaged"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // The report is printed and written, its loss counting the lines.
    assert!(
        stdout(&o).contains("damaged recording lines 2 (INCOMPLETE)"),
        "{}",
        stdout(&o)
    );
    let r = integration_tests::read_json(&json);
    assert_eq!(r["loss"]["damaged_lines"], 2, "{}", r["loss"]);
    assert_eq!(r["loss"]["complete"], false, "{}", r["loss"]);

    // Every reader of recordings: exit 2, or 0 when the user accepts them;
    // the lines are named either way.
    for cmd in [vec!["replay", rec], vec!["explain", rec], vec!["job", rec]] {
        let o = bounded(&cmd);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{cmd:?}: {err}");
        assert_eq!(count(&err, "is damaged"), 2, "{cmd:?}: {err}");
        let mut accepted = cmd.clone();
        accepted.push("--skip-damaged");
        let o = bounded(&accepted);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{accepted:?}: {err}");
        assert_eq!(count(&err, "is damaged"), 2, "{accepted:?}: {err}");
    }

    // A well-formed line of a type this build does not know is no damage.
    let newer = recording_with(
        &dir,
        "newer.rec",
        4,
        &["{\"type\":\"future-record\",\"v\":[[1,2],{\"a\":[3]}]}".to_string()],
    );
    let o = bounded(&["replay", s(&newer), "--json", s(&json)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!stderr(&o).contains("damaged"), "{}", stderr(&o));
    let r = integration_tests::read_json(&json);
    assert_eq!(r["loss"].get("damaged_lines"), None, "{}", r["loss"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A report as a long trace of many processes would have it: the cuda-copy
/// fixture's operations and processes (and its per-process sections)
/// repeated, each copy of a process with a pid of its own, written as
/// `--json` writes reports, until it is at least `bytes` long.
fn large_report(path: &Path, bytes: usize) -> u64 {
    let mut r: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("reports/cuda-copy.json")).expect("fixture"))
            .expect("JSON");
    let sections = [
        "operations",
        "processes",
        "verdicts",
        "collectives",
        "registration.processes",
        "staging.processes",
    ];
    let at = |r: &mut Value, name: &str| -> Option<Vec<Value>> {
        let v = name.split('.').try_fold(&mut *r, |v, k| v.get_mut(k))?;
        v.as_array().cloned()
    };
    let base: Vec<(&str, Vec<Value>)> = sections
        .iter()
        .filter_map(|name| Some((*name, at(&mut r, name)?)))
        .collect();
    let one = serde_json::to_string_pretty(&r).expect("serializable").len();
    let per: usize = base
        .iter()
        .map(|(_, items)| serde_json::to_string_pretty(items).expect("serializable").len())
        .sum();
    let copies = bytes.saturating_sub(one).div_ceil(per.max(1)).max(1) as u64;
    for (name, items) in &base {
        let mut all = Vec::new();
        for copy in 0..copies {
            for item in items {
                let mut item = item.clone();
                if let Some(pid) = item.get("pid").and_then(Value::as_u64) {
                    item["pid"] = (pid + copy * 100_000).into();
                }
                all.push(item);
            }
        }
        let v = name
            .split('.')
            .try_fold(&mut r, |v, k| v.get_mut(k))
            .expect("the section");
        *v = Value::Array(all);
    }
    let text = serde_json::to_string_pretty(&r).expect("serializable");
    std::fs::write(path, &text).expect("the report");
    text.len() as u64
}

/// `explain` of a 32 MiB report under an address-space limit of 128 MiB
/// (the binary, its libraries and stack) plus 6 times the report: a reader
/// that takes 16 times its input (the JSON tree first, as before) does not
/// fit, one within 4 times does; its peak RSS is measured (`peak-rss`), not
/// guessed.
#[test]
fn item2_explain_reads_a_report_within_4x_its_size() {
    let dir = scratch("memory");
    let report = dir.join("large.json");
    let size = large_report(&report, 32 << 20);
    let limit_kib = ((128 << 20) + 6 * size) / 1024;
    let o = Command::new(env!("CARGO_BIN_EXE_peak-rss"))
        .args([
            "sh",
            "-c",
            &format!("ulimit -v {limit_kib} && exec \"$0\" explain \"$1\""),
        ])
        .arg(gdrtrace_path())
        .arg(&report)
        .stdout(Stdio::null())
        .output()
        .expect("peak-rss");
    let err = stderr(&o);
    let rss: u64 = err
        .lines()
        .find_map(|l| l.strip_prefix("peak-rss: status 0 maxrss "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("explain under ulimit -v {limit_kib} failed: {err}"));
    println!(
        "explain of a {:.1} MiB report under ulimit -v {limit_kib}: peak RSS {:.1} MiB ({:.2}x the input)",
        size as f64 / f64::from(1 << 20),
        rss as f64 / f64::from(1 << 20),
        rss as f64 / size as f64
    );
    assert!(
        rss <= 4 * size,
        "peak RSS {rss} is over 4 times the report's {size} bytes"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The note of a moved flag, and how often stderr has it.
fn said_once(o: &Output, note: &str) {
    let err = stderr(o);
    assert_eq!(count(&err, note), 1, "`{note}` once in: {err}");
    assert_eq!(o.status.code(), Some(0), "{err}");
}

#[test]
fn item3_clamped_flags_say_so_once() {
    let dir = scratch("clamped");
    // Without BPF: the workloads' own flags.
    let o = bounded(&["drive", "syscalls", "--threads", "0", "--calls", "100"]);
    said_once(&o, "gdrtrace: note: --threads 0 raised to 1: the fewest threads");
    assert!(stdout(&o).contains("threads=1"), "{}", stdout(&o));
    let standins = integration_tests::standin::build_standins(Path::new(env!("CARGO_TARGET_TMPDIR")), "clamped");
    let o = bounded(&[
        "drive",
        "copy-loop",
        "--lib",
        s(&standins.cuda),
        "--bytes",
        "0",
        "--copies",
        "10",
    ]);
    said_once(&o, "gdrtrace: note: --bytes 0 raised to 1: the smallest copy");
    if !integration_tests::can_trace("item3_clamped_flags_say_so_once") {
        return;
    }
    // `attach --interval 1ms`: records on the 250 ms tick, said before
    // anything is loaded (live `top` too, below).
    let mut target = Command::new("sleep").arg("30").spawn().expect("sleep");
    let jsonl = dir.join("intervals.jsonl");
    let pid = target.id().to_string();
    let o = bounded(&[
        "attach",
        "--pid",
        &pid,
        "--interval",
        "1ms",
        "--duration",
        "2s",
        "--jsonl",
        s(&jsonl),
    ]);
    said_once(
        &o,
        "gdrtrace: note: --interval 1ms raised to 250ms: the smallest interval",
    );
    let records = std::fs::read_to_string(&jsonl)
        .expect("the interval records")
        .lines()
        .count();
    // 2 s of 250 ms ticks: 8 records or so, never one a millisecond.
    assert!((2..=12).contains(&records), "{records} interval records in 2 s");
    // Live `top` needs a terminal: script(1) gives it one (stdout and
    // stderr both arrive on it, the note before the view starts).
    let script = ["/usr/bin/script", "/bin/script"]
        .into_iter()
        .find(|p| Path::new(p).is_file());
    match script {
        None => println!("skipping: item3_clamped_flags_say_so_once: top: no script(1) for a terminal"),
        Some(script) => {
            let top = format!(
                "'{}' top --pid {pid} --interval 1ms --duration 1s",
                gdrtrace_path().display()
            );
            let (o, killed) = run_bounded(
                Command::new(script)
                    .args(["-qec", &top, "/dev/null"])
                    .stdin(Stdio::null()),
                Duration::from_secs(120),
            );
            assert!(!killed, "top hung");
            let out = stdout(&o);
            let note = "gdrtrace: note: --interval 1ms raised to 250ms: the smallest interval";
            assert_eq!(count(&out, note), 1, "{out}");
            assert_eq!(o.status.code(), Some(0), "{out}");
        }
    }
    let _ = target.kill();
    let _ = target.wait();
    // `bench pipeline --wakeup-bytes`: at most a quarter of the ring buffer.
    let o = bounded(&[
        "bench",
        "pipeline",
        "--calls",
        "1000",
        "--ringbuf-bytes",
        "1048576",
        "--wakeup-bytes",
        "1073741824",
    ]);
    said_once(
        &o,
        "gdrtrace: note: --wakeup-bytes 1073741824 lowered to 262144: a quarter of the ring buffer, the largest fill level",
    );
    let _ = std::fs::remove_dir_all(&dir);
}
