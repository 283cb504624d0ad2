//! Golden output of the commands that read the project's own documents
//! (issue 26): `explain` (text and `--format json`) of every report and
//! recording under `tests/fixtures`, `replay` (text, `--format json`,
//! `--transfers`, `--trace-event`) of every recording, `baseline record
//! --from` of every report, and `compare` (text, Markdown, JSON, HTML) of
//! the fixture baselines, of every report against its own baseline and of
//! the pairs in `PAIRS`; with the NCCL log of the same run where
//! `tests/fixtures/logs` has one. Each fixture's cases are kept in one file
//! under `tests/fixtures/golden/` (gzip when over `GZIP_OVER` bytes), and
//! this test runs the real binary again and asserts byte-identical output:
//! stdout, stderr, exit status and every file written (a file over
//! `FILE_INLINE` bytes as its length and hash).
//!
//! What is not deterministic is stripped in one place, [`normalize`]: the
//! scratch directory's path, the probe catalog hash of the build under
//! test (it changes with every catalog row), the time a baseline was
//! recorded and the kernel release of the machine running the test. The
//! golden files were written on a machine whose kernel is not any
//! fixture's (`baseline record` reads the machine's CPU, GPU and library
//! versions only for a report made on the kernel it runs).
//!
//! Regenerate (after a change that is meant to change output, and say why
//! in the commit): `GDRTRACE_GOLDEN=write cargo test -p tracer --test golden`.
use std::{
    collections::BTreeMap,
    io::{Read as _, Write as _},
    path::{Path, PathBuf},
    process::Command,
};

/// Golden files larger than this are stored gzip-compressed.
const GZIP_OVER: usize = 16 * 1024;

/// A written file larger than this is kept as its length and hash (the
/// transfer records and timeline of the GPU recordings run to megabytes).
const FILE_INLINE: usize = 64 * 1024;

/// FNV-1a 64: enough to tell a changed file (this is no defence against
/// anyone, only a fingerprint).
fn fnv1a64(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, x| {
        (h ^ u64::from(*x)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// (baseline report, current report): the regressions and changes the
/// comparison of two runs of one workload shows, old schema and new.
const PAIRS: &[(&str, &str)] = &[
    ("nccl-auto", "nccl-no-p2p"),
    ("nccl-auto", "nccl-no-p2p-no-shm"),
    ("nccl-no-p2p", "nccl-auto"),
    ("cuda-copy", "gpu-h200-copy-pinned-run"),
    ("gpu-h200-copy-pinned-run", "gpu-h200-copy-pageable-run"),
    ("gpu-h200-attach-full-auto", "gpu-h200-attach-full-no-p2p"),
    ("gpu-h200-attach-full-no-p2p", "gpu-h200-attach-full-no-p2p-no-shm"),
    ("gpu-h200-nodes-run-default", "gpu-h200-nodes-run-net-socket"),
    ("gpu-h200-nodes-attach-default", "gpu-h200-nodes-attach-ib-disable"),
    ("standin-attach-auto", "standin-attach-no-p2p"),
    ("standin-attach-no-p2p", "standin-attach-no-p2p-no-shm"),
    ("gpu-h200-one-rank-run", "gpu-h200-nodes-run-default"),
    ("pin-churn", "gpu-h200-attach-two-jobs"),
];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

fn golden_dir() -> PathBuf {
    fixtures().join("golden")
}

/// A fresh scratch directory for this test's outputs.
fn scratch() -> PathBuf {
    let d = std::env::temp_dir().join(format!("gdrtrace-golden-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("creating the scratch directory");
    d
}

/// The one place where what is not deterministic is stripped (module docs).
fn normalize(text: &str, scratch: &Path) -> String {
    let hash = gdrtrace::compare::profile::catalog_hash();
    // The revision changes with every commit; the golden files keep the release.
    let mut out = text
        .replace(gdrtrace::version::VERSION, gdrtrace::version::RELEASE)
        .replace(&format!("{}/", scratch.display()), "<scratch>/")
        .replace(&hash, "fnv1a64:<this build>");
    // The note of `compare::profile::of_reports` names the kernel this
    // machine runs, which changes under the test between runs.
    if let Ok(here) = std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        out = out.replace(
            &format!("this machine runs {}:", here.trim()),
            "this machine runs <this kernel>:",
        );
    }
    // `"recorded_unix_s": 1764...` (baselines, pretty-printed).
    let key = "\"recorded_unix_s\": ";
    let mut from = 0;
    while let Some(i) = out[from..].find(key) {
        let start = from + i + key.len();
        let end = start + out[start..].bytes().take_while(u8::is_ascii_digit).count();
        out.replace_range(start..end, "0");
        from = start + 1;
    }
    out
}

/// One command of a case: its arguments (paths relative to
/// `tests/fixtures`, scratch files as `<scratch>/NAME`) and the files it
/// writes that are part of its output.
struct Step {
    args: Vec<String>,
    files: Vec<String>,
}

fn step(args: &[&str], files: &[&str]) -> Step {
    Step {
        args: args.iter().map(|s| s.to_string()).collect(),
        files: files.iter().map(|s| s.to_string()).collect(),
    }
}

/// Runs one step in `tests/fixtures` and renders what it did.
fn run(s: &Step, scratch: &Path) -> String {
    let args: Vec<String> = s
        .args
        .iter()
        .map(|a| a.replace("<scratch>/", &format!("{}/", scratch.display())))
        .collect();
    let o = Command::new(env!("CARGO_BIN_EXE_gdrtrace"))
        .args(&args)
        .current_dir(fixtures())
        .env_remove("RUST_LOG")
        .output()
        .expect("running gdrtrace");
    let mut text = format!("$ gdrtrace {}\n", s.args.join(" "));
    text += &format!("exit: {:?}\n", o.status.code());
    text += "--- stdout\n";
    text += &String::from_utf8_lossy(&o.stdout);
    text += "--- stderr\n";
    text += &String::from_utf8_lossy(&o.stderr);
    for f in &s.files {
        let path = f.replace("<scratch>/", &format!("{}/", scratch.display()));
        text += &format!("--- file {f}\n");
        match std::fs::read(&path) {
            Ok(b) => {
                let b = normalize(&String::from_utf8_lossy(&b), scratch);
                if b.len() > FILE_INLINE {
                    text += &format!("({} bytes, fnv1a64 {:016x})\n", b.len(), fnv1a64(b.as_bytes()));
                } else {
                    text += &b;
                }
            }
            Err(e) => text += &format!("(not written: {})\n", e.kind()),
        }
    }
    text += "--- end\n\n";
    normalize(&text, scratch)
}

fn stems(dir: &str, suffixes: &[&str]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(fixtures().join(dir))
        .expect("the fixtures directory")
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let stem = suffixes.iter().find_map(|s| name.strip_suffix(s))?.to_string();
            Some((stem, format!("{dir}/{name}")))
        })
        .collect();
    out.sort();
    out
}

fn log_of(stem: &str) -> Option<String> {
    let p = format!("logs/{stem}.log");
    fixtures().join(&p).exists().then_some(p)
}

/// Every case, by golden file name.
fn cases() -> BTreeMap<String, Vec<Step>> {
    let mut cases: BTreeMap<String, Vec<Step>> = BTreeMap::new();
    let reports = stems("reports", &[".json"]);
    for (stem, path) in &reports {
        let mut steps = vec![
            step(&["explain", path], &[]),
            step(&["explain", "--format", "json", path], &[]),
        ];
        if let Some(log) = log_of(stem) {
            steps.push(step(&["explain", "--nccl-log", &log, path], &[]));
            steps.push(step(&["explain", "--format", "json", "--nccl-log", &log, path], &[]));
        }
        let base = format!("<scratch>/{stem}.baseline.json");
        steps.push(step(&["baseline", "record", "--from", path, "--out", &base], &[&base]));
        for format in ["text", "markdown", "json"] {
            steps.push(step(&["compare", "--format", format, &base, path], &[]));
        }
        cases.insert(format!("reports/{stem}"), steps);
    }
    for (stem, path) in stems("recordings", &[".rec", ".rec.gz"]) {
        let transfers = format!("<scratch>/{stem}.transfers.jsonl");
        let timeline = format!("<scratch>/{stem}.trace.json");
        let mut steps = vec![
            step(
                &["replay", "--transfers", &transfers, "--trace-event", &timeline, &path],
                &[&transfers, &timeline],
            ),
            step(&["replay", "--format", "json", &path], &[]),
            step(&["explain", &path], &[]),
            step(&["explain", "--format", "json", &path], &[]),
        ];
        if let Some(log) = log_of(&stem) {
            steps.push(step(&["replay", "--format", "json", "--nccl-log", &log, &path], &[]));
            steps.push(step(&["explain", "--nccl-log", &log, &path], &[]));
            steps.push(step(&["explain", "--format", "json", "--nccl-log", &log, &path], &[]));
        }
        cases.insert(format!("recordings/{stem}"), steps);
    }
    let baselines = stems("baselines", &[".json"]);
    for (stem, path) in &baselines {
        let mut steps = vec![step(&["explain", path], &[])];
        for (_, other) in &baselines {
            steps.push(step(&["compare", path, other], &[]));
            for format in ["text", "markdown", "json", "html"] {
                steps.push(step(
                    &["compare", "--allow-profile-change", "--format", format, path, other],
                    &[],
                ));
            }
        }
        // A baseline against a plain report of another machine and workload.
        steps.push(step(
            &["compare", "--allow-profile-change", path, "reports/pin-churn.json"],
            &[],
        ));
        cases.insert(format!("baselines/{stem}"), steps);
    }
    for (a, b) in PAIRS {
        let base = format!("<scratch>/{a}--{b}.baseline.json");
        let mut steps = vec![step(
            &[
                "baseline",
                "record",
                "--from",
                &format!("reports/{a}.json"),
                "--out",
                &base,
            ],
            &[],
        )];
        for format in ["text", "markdown", "json", "html"] {
            steps.push(step(
                &[
                    "compare",
                    "--allow-profile-change",
                    "--format",
                    format,
                    &base,
                    &format!("reports/{b}.json"),
                ],
                &[],
            ));
        }
        cases.insert(format!("pairs/{a}--{b}"), steps);
    }
    // A plain report where a baseline belongs: one line, exit 2.
    cases.insert(
        "errors/report-as-baseline".into(),
        vec![step(
            &["compare", "reports/nccl-auto.json", "reports/nccl-no-p2p.json"],
            &[],
        )],
    );
    cases
}

fn read_golden(name: &str) -> Option<String> {
    let plain = golden_dir().join(format!("{name}.txt"));
    if let Ok(t) = std::fs::read_to_string(&plain) {
        return Some(t);
    }
    let gz = std::fs::read(golden_dir().join(format!("{name}.txt.gz"))).ok()?;
    let mut t = String::new();
    flate2::read::GzDecoder::new(gz.as_slice())
        .read_to_string(&mut t)
        .expect("a golden file decompresses");
    Some(t)
}

fn write_golden(name: &str, text: &str) {
    if read_golden(name).as_deref() == Some(text) {
        return;
    }
    let plain = golden_dir().join(format!("{name}.txt"));
    let gz = golden_dir().join(format!("{name}.txt.gz"));
    std::fs::create_dir_all(plain.parent().expect("a parent")).expect("creating the golden directory");
    let _ = std::fs::remove_file(&plain);
    let _ = std::fs::remove_file(&gz);
    if text.len() > GZIP_OVER {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(text.as_bytes()).expect("compressing");
        std::fs::write(&gz, e.finish().expect("compressing")).expect("writing a golden file");
    } else {
        std::fs::write(&plain, text).expect("writing a golden file");
    }
}

/// The first line where two texts differ, with its number.
fn first_difference(want: &str, got: &str) -> String {
    for (i, (w, g)) in want.lines().zip(got.lines()).enumerate() {
        if w != g {
            return format!("line {}:\n  golden: {w}\n  now:    {g}", i + 1);
        }
    }
    format!(
        "one is a prefix of the other ({} and {} lines)",
        want.lines().count(),
        got.lines().count()
    )
}

#[test]
fn explain_compare_and_replay_match_their_golden_output() {
    let write = std::env::var("GDRTRACE_GOLDEN").is_ok_and(|v| v == "write");
    let scratch = scratch();
    let cases = cases();
    assert!(cases.len() > 60, "the fixtures are found ({} cases)", cases.len());
    // Two workers: the cases are independent processes.
    let names: Vec<&String> = cases.keys().collect();
    let outputs: BTreeMap<String, String> = std::thread::scope(|s| {
        let half = names.len().div_ceil(2);
        let workers: Vec<_> = names
            .chunks(half)
            .map(|chunk| {
                let (cases, scratch) = (&cases, &scratch);
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|name| {
                            let text: String = cases[*name].iter().map(|st| run(st, scratch)).collect();
                            ((*name).clone(), text)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("a worker")).collect()
    });
    let mut failed = Vec::new();
    for (name, text) in &outputs {
        if write {
            write_golden(name, text);
            continue;
        }
        match read_golden(name) {
            None => failed.push(format!("{name}: no golden file (GDRTRACE_GOLDEN=write writes it)")),
            Some(want) if want != *text => {
                let keep = scratch.join("now").join(format!("{name}.txt"));
                std::fs::create_dir_all(keep.parent().expect("a parent")).expect("scratch");
                std::fs::write(&keep, text).expect("keeping the output");
                failed.push(format!(
                    "{name}: output differs from its golden file ({}); now in {}",
                    first_difference(&want, text),
                    keep.display()
                ));
            }
            Some(_) => {}
        }
    }
    // A golden file no case writes any more is stale.
    if !write {
        for kind in ["reports", "recordings", "baselines", "pairs", "errors"] {
            for e in std::fs::read_dir(golden_dir().join(kind))
                .into_iter()
                .flatten()
                .flatten()
            {
                let file = e.file_name().to_string_lossy().into_owned();
                let stem = file.trim_end_matches(".gz").trim_end_matches(".txt");
                if !outputs.contains_key(&format!("{kind}/{stem}")) {
                    failed.push(format!("{kind}/{file}: a golden file of no case"));
                }
            }
        }
    }
    if failed.is_empty() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    assert!(
        failed.is_empty(),
        "{} of {} cases:\n{}",
        failed.len(),
        outputs.len(),
        failed.join("\n")
    );
}
