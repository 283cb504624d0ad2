//! `gdrtrace baseline record` and `gdrtrace compare`, driven through the real
//! binary on real reports from the 2xH200 machine (tests/fixtures/reports):
//! a genuine fallback (NCCL p2p/nvlink -> shm) fails with exit 1 naming it,
//! and the HTML page renders its plots in headless Chromium (bad baselines:
//! bad_input.rs).
use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use gdrtrace::{classify::Transport, compare::Baseline, probes::Status};
use integration_tests::{
    assert_one_line, path_str as s, read_as, read_report, report_of, run, stderr, stdout, write_as,
};

fn fixture(name: &str) -> String {
    integration_tests::fixture(&format!("reports/{name}"))
}

/// A fresh scratch directory for one test.
fn scratch(test: &str) -> PathBuf {
    integration_tests::scratch(&format!("compare-{test}"))
}

/// `baseline record --from REPORT` into DIR/NAME.
fn record(dir: &Path, report: &str, name: &str) -> PathBuf {
    let out = dir.join(name);
    let o = run(&["baseline", "record", "--from", report, "--out", s(&out)]);
    assert!(o.status.success(), "baseline record failed: {}", stderr(&o));
    assert!(stdout(&o).contains("baseline: 1 run(s)"), "{}", stdout(&o));
    out
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited, not killed")
}

#[test]
fn baseline_holds_profile_and_reports() {
    let dir = scratch("profile");
    let b: Baseline = read_as(&record(&dir, &fixture("nccl-auto.json"), "auto.json"));
    assert_eq!(b.schema, "gdrtrace.baseline/v1");
    let p = &b.profile;
    assert_eq!(p.kernel, "6.18.44-fc-v657-gpu");
    assert_eq!(p.lockdown, "integrity");
    // From NCCL's own summary, whatever machine records the baseline.
    assert_eq!(p.nccl.as_deref(), Some("2.28.3"));
    assert!(p.probe_catalog.starts_with("fnv1a64:"), "{}", p.probe_catalog);
    let probe = |n: &str| p.probes.get(n).map(String::as_str);
    assert_eq!(probe("libnccl"), Some("attached via uprobe/uretprobe"));
    assert_eq!(probe("ib_umem_get"), Some("unavailable"));
    assert_eq!(b.runs[0].workload, "nccl-auto");
    let r = report_of("the baseline's run", &b.runs[0].report);
    assert_eq!(r.verdicts[0].transport, Transport::P2pNvlink);
}

#[test]
fn injected_fallback_p2p_to_shm_fails_naming_it() {
    let dir = scratch("fallback");
    let base = record(&dir, &fixture("nccl-auto.json"), "auto.json");
    let o = run(&["compare", s(&base), &fixture("nccl-no-p2p.json")]);
    let out = stdout(&o);
    assert_eq!(code(&o), 1, "{out}{}", stderr(&o));
    let headline = out.lines().nth(1).unwrap_or_default();
    assert!(
        headline.starts_with("compare: REGRESSION") && headline.contains("p2p/nvlink x2 -> shm x2"),
        "{out}"
    );
    assert!(out.contains("Transport changes (REGRESSION)"), "{out}");
    // NCCL's bus bandwidth at 64 MiB fell from 268.6 to 26.9 GB/s.
    let bw = out
        .lines()
        .find(|l| l.trim_start().starts_with("all-reduce busbw 64M bandwidth"))
        .unwrap_or_else(|| panic!("no 64M bandwidth row: {out}"));
    assert!(
        bw.contains("268.61 GB/s") && bw.contains("26.92 GB/s") && bw.ends_with("REGRESSION"),
        "{bw}"
    );
    // Markdown for CI summaries names it too.
    let o = run(&[
        "compare",
        s(&base),
        &fixture("nccl-no-p2p.json"),
        "--format",
        "markdown",
    ]);
    assert_eq!(code(&o), 1);
    let md = stdout(&o);
    assert!(md.starts_with("## gdrtrace compare: REGRESSION"), "{md}");
    assert!(md.contains("- **nccl-auto** verdicts: p2p/nvlink x2 → shm x2"), "{md}");
}

#[test]
fn same_report_is_no_regression() {
    let dir = scratch("same");
    let base = record(&dir, &fixture("nccl-auto.json"), "auto.json");
    let o = run(&["compare", s(&base), &fixture("nccl-auto.json")]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("compare: no regression"), "{}", stdout(&o));
    // A baseline against itself, too.
    let o = run(&["compare", s(&base), s(&base)]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
}

#[test]
fn copies_turned_host_staged_fail() {
    // The real cuda-copy report, with its pinned (direct DMA) host-to-device
    // copies relabelled host-staged: what a pinning failure would look like.
    let dir = scratch("staged");
    let base = record(&dir, &fixture("cuda-copy.json"), "copy.json");
    let mut r = read_report(Path::new(&fixture("cuda-copy.json")));
    let mut changed = 0;
    for o in &mut r.operations {
        if o.name == "cuMemcpyHtoD" && o.transport == "host-only" {
            o.transport = "host-staged";
            changed += 1;
        }
    }
    assert_eq!(changed, 1);
    let cur = dir.join("staged.json");
    write_as(&cur, &r);
    let o = run(&["compare", s(&base), s(&cur)]);
    let out = stdout(&o);
    assert_eq!(code(&o), 1, "{out}");
    assert!(
        // The fixture predates gpu-host-dma: its pinned copies' host-only reads as that.
        out.contains("cuMemcpyHtoD") && out.contains("gpu-host-dma (6086), host-staged (3043) -> host-staged (9129)"),
        "{out}"
    );
    let staged = out
        .lines()
        .find(|l| l.trim_start().starts_with("host-staged share of bytes"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(staged.ends_with("REGRESSION"), "{staged}");
}

#[test]
fn profile_change_refused_then_listed() {
    let dir = scratch("profile-change");
    let base = record(&dir, &fixture("pin-churn.json"), "base.json");
    let mut r = read_report(Path::new(&fixture("pin-churn.json")));
    r.host.kernel = "6.12.48+deb13-amd64".into();
    let cur = dir.join("cur.json");
    write_as(&cur, &r);
    let o = run(&["compare", s(&base), s(&cur)]);
    assert_eq!(code(&o), 2, "{}", stdout(&o));
    let err = stderr(&o);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("kernel: 6.18.44-fc-v657-gpu -> 6.12.48+deb13-amd64") && err.contains("--allow-profile-change"),
        "{err}"
    );
    let o = run(&["compare", s(&base), s(&cur), "--allow-profile-change"]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    let out = stdout(&o);
    let first = out.find("Profile differences").expect("profile section");
    assert!(first < out.find("Workload").expect("workload section"), "{out}");
    assert!(out.contains("6.18.44-fc-v657-gpu -> 6.12.48+deb13-amd64"), "{out}");
}

#[test]
fn lost_probe_is_called_out_first_and_fails() {
    let dir = scratch("lost-probe");
    let base = record(&dir, &fixture("pin-churn.json"), "base.json");
    let mut r = read_report(Path::new(&fixture("pin-churn.json")));
    for c in &mut r.coverage {
        if c.point == "io_uring_register" {
            c.status = Status::Unavailable;
            c.via = None;
            c.reason = Some("tracepoint: ENOENT".into());
        }
    }
    let cur = dir.join("cur.json");
    write_as(&cur, &r);
    let o = run(&["compare", s(&base), s(&cur)]);
    let out = stdout(&o);
    assert_eq!(code(&o), 1, "{out}");
    let lost = out.find("Probe points no longer available (REGRESSION)").expect(&out);
    assert!(lost < out.find("Workload").expect("workload"), "{out}");
    assert!(out.contains("io_uring_register") && out.contains("was attached via tracepoint, now unavailable"));
    let t = dir.join("t.toml");
    std::fs::write(&t, "[defaults]\nprobe_lost_fails = false\n").expect("writing thresholds");
    let o = run(&["compare", s(&base), s(&cur), "--thresholds", s(&t)]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
}

fn chromium() -> Option<String> {
    ["chromium", "chromium-browser", "google-chrome", "headless_shell"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(str::to_string)
}

/// Pixels within `tol` of `rgb` in a decoded RGB(A) screenshot.
fn count_colour(png_path: &Path, rgb: (u8, u8, u8), tol: u8) -> (usize, u32, u32) {
    let file = std::fs::File::open(png_path).expect("opening the screenshot");
    let mut decoder = png::Decoder::new(std::io::BufReader::new(file));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("buffer size")];
    let info = reader.next_frame(&mut buf).expect("a frame");
    let channels = info.color_type.samples();
    assert!(channels >= 3, "unexpected colour type {:?}", info.color_type);
    let near = |a: u8, b: u8| a.abs_diff(b) <= tol;
    let n = buf[..info.buffer_size()]
        .chunks(channels)
        .filter(|p| near(p[0], rgb.0) && near(p[1], rgb.1) && near(p[2], rgb.2))
        .count();
    (n, info.width, info.height)
}

#[test]
fn html_page_renders_plots_in_headless_chromium() {
    let dir = scratch("html");
    let base = record(&dir, &fixture("nccl-auto.json"), "auto.json");
    let html = dir.join("compare.html");
    let o = run(&["compare", s(&base), &fixture("nccl-no-p2p.json"), "--html", s(&html)]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let page = std::fs::read_to_string(&html).expect("the HTML page");
    assert!(
        page.starts_with("<!DOCTYPE html>") && page.matches("<svg").count() >= 3,
        "few plots"
    );
    assert!(
        !page.contains("src=\"http") && !page.contains("<script"),
        "not self-contained"
    );
    assert!(!page.contains("plot not drawn"), "a plot failed");
    let Some(browser) = chromium() else {
        println!(
            "skipping: html_page_renders_plots_in_headless_chromium: no chromium on PATH (apt-get install chromium)"
        );
        return;
    };
    let shot = dir.join("shot.png");
    let o = Command::new("timeout")
        .arg("120")
        .arg(&browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--window-size=1280,2000")
        .arg(format!("file://{}", html.display()))
        .output()
        .expect("running chromium");
    assert!(
        shot.is_file(),
        "{browser} wrote no screenshot (exit {:?}): {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    let (blue, w, h) = count_colour(&shot, (31, 119, 180), 6);
    let (orange, _, _) = count_colour(&shot, (255, 127, 14), 6);
    assert_eq!((w, h), (1280, 2000));
    // The legend swatches are ~150 pixels each; the plots are thousands.
    assert!(blue > 5000, "baseline series barely visible: {blue} pixels");
    assert!(orange > 5000, "current series barely visible: {orange} pixels");
    println!("screenshot {w}x{h}: {blue} baseline-blue and {orange} current-orange pixels");
}

fn baseline_fixture(name: &str) -> String {
    format!("{}/fixtures/baselines/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The VM tier's kernel-upgrade example, on baselines it recorded (Debian
/// 6.1.0-57 and 6.12.117 under QEMU, pin-churn and verbs on rxe0).
#[test]
fn kernel_upgrade_lists_kernel_probe_matrix_and_metrics() {
    let (old, new) = (baseline_fixture("vm-6.1.json"), baseline_fixture("vm-6.12.json"));
    assert_one_line(
        &run(&["compare", &old, &new]),
        2,
        &["kernel: 6.1.0-57-amd64 -> 6.12.117+deb12-amd64"],
        "a kernel upgrade",
    );
    let o = run(&["compare", &old, &new, "--allow-profile-change"]);
    let out = stdout(&o);
    // Latencies under software emulation moved past their thresholds.
    assert_eq!(code(&o), 1, "{out}{}", stderr(&o));
    let profile = out.find("Profile differences").expect("profile section");
    let kernel = out
        .find("kernel                                   6.1.0-57-amd64 -> 6.12.117+deb12-amd64")
        .unwrap_or_else(|| panic!("kernel line: {out}"));
    let workloads = out.find("\nWorkload pin-churn").expect("pin-churn table");
    assert!(profile < kernel && kernel < workloads, "{out}");
    assert!(
        out.contains("probe unpin_folio") && out.contains("unavailable -> attached via fentry/fexit"),
        "{out}"
    );
    assert!(
        out.contains("attached via kprobe/kretprobe -> attached via fentry/fexit"),
        "{out}"
    );
    assert!(out.contains("\nWorkload verbs-churn"), "{out}");
    assert!(out.contains("ib_umem_get [host-only] latency p50"), "{out}");
    // 6.12 pins io_uring buffers with pin_user_pages_fast, 6.1 with pin_user_pages.
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with("pin_user_pages calls") && l.contains("not seen"))
    );
    // The upgrade did not change a transport.
    assert!(!out.contains("Transport changes"), "{out}");
}

/// Percentiles rebuilt from the serialized histograms are exactly the
/// report's.
#[test]
fn serialized_histograms_reproduce_the_reports_percentiles() {
    let mut checked = 0;
    for f in ["vm-6.1.json", "vm-6.12.json"] {
        let b: Baseline = read_as(Path::new(&baseline_fixture(f)));
        for run in &b.runs {
            for o in report_of(f, &run.report).operations {
                let h = gdrtrace::compare::decode_hist(o.histogram.as_deref().expect("histogram field"))
                    .unwrap_or_else(|e| panic!("{f} {}: {e}", o.name));
                let l = &o.latency;
                assert_eq!(h.len(), l.count, "{f} {}", o.name);
                assert_eq!(h.min(), l.min);
                assert_eq!(h.max(), l.max);
                for (q, k, want) in [
                    (0.5, "p50", l.p50),
                    (0.9, "p90", l.p90),
                    (0.99, "p99", l.p99),
                    (0.999, "p999", l.p999),
                ] {
                    assert_eq!(h.value_at_quantile(q), want, "{f} {} {k}", o.name);
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 20, "only {checked} operations");
}

#[test]
fn baseline_record_from_bad_reports_is_one_line() {
    let dir = scratch("record-bad");
    let out = dir.join("b.json");
    for (input, expect) in [
        ("/nonexistent/report.json", "cannot read /nonexistent/report.json"),
        ("truncated", "is truncated"),
        ("baseline", "is not a usable report: schema \"gdrtrace.baseline/v1\""),
    ] {
        let path = match input {
            "truncated" => {
                let p = dir.join("t.json");
                let text = std::fs::read_to_string(fixture("pin-churn.json")).expect("fixture");
                std::fs::write(&p, &text[..100]).expect("writing");
                p.to_string_lossy().into_owned()
            }
            "baseline" => baseline_fixture("vm-6.1.json"),
            p => p.to_string(),
        };
        let o = run(&["baseline", "record", "--from", &path, "--out", s(&out)]);
        assert_one_line(&o, 2, &[expect], input);
        assert!(!out.exists(), "{input}: a baseline was written");
    }
}
