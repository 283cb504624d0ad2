//! `--trace-event`: the timeline of a GPU recording (2x H200, NCCL
//! all-reduce, `tests/fixtures/recordings`) opens in real consumers,
//! offline: Holistic Trace Analysis's trace parser (PyPI) counts its
//! slices, and speedscope (npm) imports and draws it in headless Chromium.
//! Both are installed under `target/consumers` by `scripts/install-vm-deps.sh`
//! (the suite's set-up); where they are missing the test says `skipping:`.
use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
};

use gdrtrace::stats::feed::Input;
use integration_tests::{
    parse_as, read_as,
    trace_event::{Event, TraceFile},
};
use integration_tests::{path_str as s, repo_root, run, stderr, trace_required};
use serde::Deserialize;

const RECORDING: &str = "recordings/gpu-h200-nccl-auto.rec.gz";

fn consumers() -> PathBuf {
    repo_root().join("target/consumers")
}

/// What the recording holds, counted from its lines: call events (every
/// completed call, and entry-only calls other than the first-call samples
/// of kernel-aggregated rows), threads with calls, and the intervals in
/// which a kernel-aggregated collective row's totals grew.
struct Expected {
    calls: usize,
    threads: BTreeSet<(u32, u32)>,
    row_intervals: usize,
}

fn expected(path: &str) -> Expected {
    let mut input = gdrtrace::input::Input::open(Path::new(path)).expect("opening the recording");
    let rec = gdrtrace::recording::read(&mut input).expect("a valid recording");
    let mut calls = 0;
    let mut threads = BTreeSet::new();
    let mut row_intervals = 0;
    let mut last = std::collections::BTreeMap::new();
    for (i, _) in &rec.inputs {
        match i {
            Input::Event(e) if matches!(gdrtrace::probes::ops::kind_name(e.kind), "call" | "entry" | "row-first") => {
                let sample = gdrtrace::probes::ops::kind_name(e.kind) == "entry"
                    && gdrtrace::probes::uapi::row_of(e.op).is_some_and(|(_, r)| r.aggregate);
                if !sample {
                    calls += 1;
                    threads.insert((e.pid, e.tid));
                }
            }
            Input::Aggregates { rows, .. } => {
                for (k, v) in rows {
                    if gdrtrace::probes::catalog::socket_direction(k.op).is_some() {
                        continue;
                    }
                    let before = last.insert((k.tgid, k.op, k.handle), v.calls).unwrap_or(0);
                    row_intervals += usize::from(v.calls > before);
                }
            }
            _ => {}
        }
    }
    Expected {
        calls,
        threads,
        row_intervals,
    }
}

/// `replay RECORDING --trace-event OUT`, parsed.
fn export(dir: &Path) -> (PathBuf, TraceFile) {
    let out = dir.join("timeline.json");
    let o = run(&[
        "replay",
        &integration_tests::fixture(RECORDING),
        "--format",
        "json",
        "--trace-event",
        s(&out),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = read_as(&out);
    (out, v)
}

fn slices(v: &TraceFile, aggregated: bool) -> Vec<&Event> {
    v.trace_events
        .iter()
        .filter(|e| e.ph == "X" && (e.cat == "collective-aggregated") == aggregated)
        .collect()
}

#[test]
fn export_has_a_slice_per_recorded_call_and_aggregated_interval() {
    let dir = integration_tests::scratch("timeline-export");
    let want = expected(&integration_tests::fixture(RECORDING));
    assert!(
        want.calls > 1000 && want.row_intervals > 0,
        "the fixture has calls and collectives"
    );
    let (_, v) = export(&dir);
    assert_eq!(v.other_data.schema, "gdrtrace.trace-event/v1");
    let calls = slices(&v, false);
    assert_eq!(calls.len(), want.calls, "a slice per call event of the recording");
    let rows = slices(&v, true);
    assert_eq!(
        rows.len(),
        want.row_intervals,
        "a slice per aggregated row and interval"
    );
    // Every call slice carries its verdict and evidence; the aggregated
    // ones the count and the process's verdict (NVLink on this machine).
    assert!(
        calls
            .iter()
            .all(|e| e.args.transport.is_some() && e.args.evidence.is_some())
    );
    assert!(
        rows.iter()
            .all(|e| e.args.calls.is_some_and(|c| c > 0) && e.args.transport.as_deref() == Some("p2p/nvlink")),
        "{:?}",
        rows.first()
    );
    // A named track per thread with calls.
    let named: BTreeSet<(u64, u64)> = v
        .thread_names()
        .map(|e| (e.pid, e.tid.expect("a thread name's tid")))
        .collect();
    for (pid, tid) in &want.threads {
        assert!(
            named.contains(&(u64::from(*pid), u64::from(*tid))),
            "thread {pid}/{tid} unnamed"
        );
    }
    // Counters: bytes per second, each value held until the next sample of
    // its process, so their integral is the bytes moved: at least the
    // collectives', at most with every call's.
    let mut samples: std::collections::BTreeMap<u64, Vec<(f64, f64)>> = Default::default();
    for e in v.trace_events.iter().filter(|e| e.ph == "C") {
        let (pid, ts) = (e.pid, e.ts.expect("a counter's ts"));
        samples
            .entry(pid)
            .or_default()
            .push((ts, e.args.moved.expect("a counter's moved bytes")));
    }
    let counted: f64 = samples
        .values()
        .map(|s| s.windows(2).map(|w| w[0].1 * (w[1].0 - w[0].0) / 1e6).sum::<f64>())
        .sum();
    let bytes = |s: &[&Event]| s.iter().filter_map(|e| e.args.bytes).sum::<f64>();
    let (collectives, all) = (bytes(&rows), bytes(&rows) + bytes(&calls));
    assert!(
        counted >= collectives * 0.999 && counted <= all * 1.001,
        "moved bytes on the counters {counted}, collectives {collectives}, all calls {all}"
    );
}

/// The Python of the venv Holistic Trace Analysis is installed in.
fn hta_python(test: &str) -> Option<PathBuf> {
    let py = consumers().join("hta/bin/python");
    let ok = Command::new(&py)
        .args(["-c", "import hta"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        let why = format!(
            "Holistic Trace Analysis is not installed in {} (scripts/install-vm-deps.sh)",
            py.display()
        );
        assert!(!trace_required(), "{test}: {why}, and this run must have it");
        println!("skipping: {test}: {why}");
        return None;
    }
    Some(py)
}

#[test]
fn holistic_trace_analysis_parses_every_slice() {
    let test = "holistic_trace_analysis_parses_every_slice";
    let Some(py) = hta_python(test) else { return };
    let dir = integration_tests::scratch("timeline-hta");
    let want = expected(&integration_tests::fixture(RECORDING));
    let (file, _) = export(&dir);
    // HTA's own parser (the one TraceAnalysis uses per rank): a DataFrame
    // of the slices, names through its symbol table.
    let script = r#"
import sys, json
from hta.common.trace_parser import parse_trace_dataframe
from hta.configs.parser_config import ParserConfig
meta, df, sym = parse_trace_dataframe(sys.argv[1], ParserConfig.get_default_cfg())
names = sym.get_sym_table()
cat = df["cat"].map(lambda i: names[i])
print(json.dumps({"rows": len(df), "aggregated": int((cat == "collective-aggregated").sum()),
                  "schema": meta["otherData"]["schema"], "tracks": int(df.groupby(["pid", "tid"]).ngroups)}))
"#;
    let o = Command::new(&py)
        .args(["-c", script, s(&file)])
        .output()
        .expect("running python");
    assert!(o.status.success(), "HTA failed: {}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    /// What the script above prints.
    #[derive(Debug, Deserialize)]
    struct Hta {
        rows: usize,
        aggregated: usize,
        schema: String,
    }
    let got: Hta = parse_as("HTA's summary", out.lines().last().unwrap_or(""));
    println!("HTA: {got:?}");
    assert_eq!(got.schema, "gdrtrace.trace-event/v1");
    assert_eq!(
        got.rows,
        want.calls + want.row_intervals,
        "HTA's slices: the recording's calls and intervals"
    );
    assert_eq!(got.aggregated, want.row_intervals);
}

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"].into_iter().find(|b| {
        Command::new(b)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// speedscope's page and the script that hands it a profile, as its own
/// command line (`speedscope FILE`) does.
fn speedscope_page(test: &str, dir: &Path, file: &Path) -> Option<(String, &'static str)> {
    let index = consumers().join("node_modules/speedscope/dist/release/index.html");
    let browser = chromium();
    if !index.is_file() || browser.is_none() {
        let why = if browser.is_none() {
            "no chromium on PATH (scripts/setup.sh --vm)".to_string()
        } else {
            format!(
                "speedscope is not installed at {} (scripts/install-vm-deps.sh)",
                index.display()
            )
        };
        assert!(!trace_required(), "{test}: {why}, and this run must have it");
        println!("skipping: {test}: {why}");
        return None;
    }
    let data = std::fs::read(file).expect("the export");
    let loader = dir.join("profile.js");
    std::fs::write(
        &loader,
        format!(
            "speedscope.loadFileFromBase64({:?}, {:?})",
            "timeline.json",
            base64(&data)
        ),
    )
    .expect("writing the loader");
    Some((
        format!("file://{}#localProfilePath={}", index.display(), loader.display()),
        browser.expect("checked"),
    ))
}

fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n =
            (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn chrome(browser: &str, dir: &Path) -> Command {
    let mut c = Command::new("timeout");
    c.arg("120")
        .arg(browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
        .arg("--allow-file-access-from-files")
        .arg("--virtual-time-budget=15000")
        .arg(format!("--user-data-dir={}", dir.join("profile").display()));
    c
}

#[test]
fn speedscope_imports_and_draws_every_track() {
    let test = "speedscope_imports_and_draws_every_track";
    let dir = integration_tests::scratch("timeline-speedscope");
    let want = expected(&integration_tests::fixture(RECORDING));
    let (file, v) = export(&dir);
    let Some((url, browser)) = speedscope_page(test, &dir, &file) else {
        return;
    };
    // The page after the import: speedscope names the profile it shows
    // and how many there are, one per thread track of the file.
    let o = chrome(browser, &dir)
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .expect("chromium");
    let dom = String::from_utf8_lossy(&o.stdout);
    assert!(
        dom.contains("timeline.json - speedscope"),
        "speedscope did not import the file: {}",
        &dom[..dom.len().min(2000)]
    );
    let tracks = want.threads.len() + v.thread_names().filter(|e| e.tid.is_some_and(|t| t >= 1 << 30)).count();
    assert!(
        dom.contains(&format!("(1/{tracks})")),
        "speedscope shows a profile per track ({tracks}): {}",
        dom.split("(1/").nth(1).map_or("none", |t| &t[..t.len().min(20)])
    );
    // Drawn: the flame chart's coloured slices fill part of the canvas.
    let shot = dir.join("speedscope.png");
    let o = chrome(browser, &dir)
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--window-size=1400,800")
        .arg(&url)
        .output()
        .expect("chromium");
    assert!(shot.is_file(), "no screenshot: {}", String::from_utf8_lossy(&o.stderr));
    let coloured = coloured_pixels(&shot);
    println!("speedscope screenshot {}: {coloured} coloured pixels", shot.display());
    assert!(
        coloured > 20_000,
        "the flame chart is nearly empty: {coloured} coloured pixels"
    );
}

/// Pixels with a clear hue (slices), not white, grey or black (page, text).
fn coloured_pixels(png_path: &Path) -> usize {
    let file = std::fs::File::open(png_path).expect("opening the screenshot");
    let mut decoder = png::Decoder::new(std::io::BufReader::new(file));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("buffer size")];
    let info = reader.next_frame(&mut buf).expect("a frame");
    let channels = info.color_type.samples();
    buf[..info.buffer_size()]
        .chunks(channels)
        .filter(|p| {
            let (mx, mn) = (p[0].max(p[1]).max(p[2]), p[0].min(p[1]).min(p[2]));
            mx - mn > 40
        })
        .count()
}
