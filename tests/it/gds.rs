//! GPUDirect Storage on real probes, without a GPU: `gdrtrace drive gds`
//! writing a "GPU" buffer to a file and reading it back through the
//! libcufile **stand-in** (`tests/standin/standin_cufile.c`, built as
//! `libcufile.so.0`) over the libcuda **stand-in**, traced by `gdrtrace
//! run`. The stand-in moves the bytes in one of two shapes:
//!
//! - compat (what libcufile does without nvidia-fs, as on this host):
//!   `pread`/`pwrite` through a `cuMemHostRegister`'d bounce buffer and
//!   `cuMemcpyHtoDAsync`/`cuMemcpyDtoHAsync` copies;
//! - direct: an ioctl per I/O on a **stand-in** nvidia-fs device node (a
//!   character device named `nvidia-fs0` the test makes with mknod, with
//!   the numbers of /dev/null), and no host copy or POSIX I/O.
//!
//! What is proven:
//! - `compat_shape_is_compat_with_its_staged_bytes_and_cause`: one write
//!   and one read path on the file, each `compat (POSIX through host
//!   memory)`, host-staged, with staged bytes equal to the bytes the
//!   workload wrote and read (the file I/O the kernel counted), the cause
//!   "nvidia-fs not loaded" (this host has none), which `explain` names,
//!   and with which a cuFile log line saying compat mode agrees
//!   (`--cufile-log`); `replay` of the recording gives the same paths;
//! - `direct_shape_is_gds_direct_and_compare_flags_compat`: the direct
//!   stand-in's paths are `gds-direct (nvidia-fs)` with nothing staged,
//!   and `compare` of a baseline recorded from it against the compat
//!   report exits 1 naming the regression;
//! - `attach_mid_run_sees_the_compat_reads_of_a_handle_registered_before`:
//!   `attach` joins a loop of 4 KiB cuFileReads whose handle was
//!   registered before it; the read path is compat, with 4 KiB reads'
//!   bytes (only those while attached), staged within 5% of them with the
//!   cause "nvidia-fs not loaded", though its buffer's allocation predates
//!   the attach (its memory `unknown` on the stand-in): the copies between
//!   GPU and host memory in its time carried its bytes.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use gdrtrace::{
    classify::{Transport, path::PeerKind},
    drive::gds::GdsSummary,
};
use integration_tests::{Report, can_trace, compile, gdrtrace_path, read_as, read_report, run, stderr, stdout};

/// The tests compete for 2 CPUs with their traps: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

const COMPAT: &str = "compat (POSIX through host memory)";
const DIRECT: &str = "gds-direct (nvidia-fs)";
/// The buffer and the times it is written, then read.
const SIZE: u64 = 1 << 20;
const ITERATIONS: u64 = 4;

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// One traced run of the workload: its report, its summary, the
/// recording, and the stand-ins' directory.
struct Traced {
    dir: PathBuf,
    report: Report,
    summary: GdsSummary,
    json: PathBuf,
    rec: PathBuf,
    _built: Built,
}

/// The stand-ins in a fresh directory (removed on drop): the libcuda
/// stand-in (in `StandIns`), the libcufile stand-in, and the path of the
/// stand-in nvidia-fs node (made only when `direct`).
struct Built {
    standins: integration_tests::standin::StandIns,
    dir: PathBuf,
    cufile: PathBuf,
    nvfs: PathBuf,
}

impl Drop for Built {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn build(test: &str, direct: bool) -> Built {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let standins = integration_tests::standin::build_standins(tmp, &format!("gds-{test}"));
    let dir = tmp.join(integration_tests::unique(&format!("gdrtrace-gds-{test}")));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the test directory");
    let cufile = dir.join("libcufile.so.0");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("standin/standin_cufile.c");
    compile(&[
        "-O2",
        "-fPIC",
        "-shared",
        "-Wall",
        "-Wl,-soname,libcufile.so.0",
        "-o",
        s(&cufile),
        s(&src),
        "-ldl",
    ]);
    // The stand-in opens this node in direct shape; a path that does not
    // exist leaves it in compat shape (as a host without nvidia-fs).
    let nvfs = dir.join("nvidia-fs0");
    if direct {
        let o = Command::new("mknod")
            .args([s(&nvfs), "c", "1", "3"])
            .output()
            .expect("mknod");
        assert!(o.status.success(), "mknod: {}", stderr(&o));
    }
    Built {
        standins,
        dir,
        cufile,
        nvfs,
    }
}

/// The arguments of `drive gds` over the stand-ins, then `extra`.
fn drive_args(b: &Built, data: &Path, summary: &Path, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "drive",
        "gds",
        "--file",
        s(data),
        "--size",
        &SIZE.to_string(),
        "--iterations",
        &ITERATIONS.to_string(),
        "--cufile",
        s(&b.cufile),
        "--cuda",
        s(&b.standins.cuda),
        "--settle-ms",
        "400",
        "--summary",
        s(summary),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    v.extend(extra.iter().map(|a| a.to_string()));
    v
}

/// `run --collectives exact -- drive gds` over the stand-ins; `direct`
/// gives the libcufile stand-in a stand-in nvidia-fs device node.
fn traced(test: &str, direct: bool) -> Traced {
    let b = build(test, direct);
    let dir = b.dir.clone();
    let json = dir.join("report.json");
    let rec = dir.join("trace.rec");
    let summary = dir.join("summary.json");
    let data = dir.join("data.bin");
    let o = Command::new(gdrtrace_path())
        .args([
            "run",
            "--collectives",
            "exact",
            "--json",
            s(&json),
            "--record",
            s(&rec),
            "--",
        ])
        .arg(gdrtrace_path())
        .args(drive_args(&b, &data, &summary, &[]))
        .env("GDRTRACE_STANDIN_NVFS", &b.nvfs)
        .env_remove("CUFILE_FORCE_COMPAT_MODE")
        .output()
        .expect("gdrtrace run");
    assert!(o.status.success(), "run: {}{}", stdout(&o), stderr(&o));
    let summary: GdsSummary = read_as(&summary);
    assert!(summary.verified, "the stand-in moved the bytes: {summary:?}");
    Traced {
        report: read_report(&json),
        dir,
        summary,
        json,
        rec,
        _built: b,
    }
}

/// The file paths of the workload's process: (op, via, transport, bytes,
/// staged bytes, cause, memory).
type FilePath = (String, String, Transport, u64, u64, Option<String>, String);

fn file_paths(r: &Report, pid: u32) -> Vec<FilePath> {
    let mut v: Vec<_> = r
        .paths
        .iter()
        .filter(|p| p.pid == pid && p.peer_kind == PeerKind::File)
        .map(|p| {
            (
                p.op.name().to_string(),
                p.via.clone(),
                p.transport,
                p.bytes,
                p.staged_bytes,
                p.cause.clone(),
                p.memory.clone(),
            )
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// The bytes of the direction whose op name says write, else read.
fn moved(sum: &GdsSummary, op: &str) -> u64 {
    if op.contains("write") {
        sum.bytes_written
    } else {
        sum.bytes_read
    }
}

#[test]
fn compat_shape_is_compat_with_its_staged_bytes_and_cause() {
    if !can_trace("compat_shape_is_compat_with_its_staged_bytes_and_cause") {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = traced("compat", false);
    let sum = &t.summary;
    assert_eq!(sum.bytes_written, SIZE * ITERATIONS);
    assert_eq!(sum.bytes_read, SIZE * ITERATIONS);
    let paths = file_paths(&t.report, sum.pid);
    assert_eq!(paths.len(), 2, "a write and a read path on the file: {paths:#?}");
    for (op, via, transport, bytes, staged, cause, _) in &paths {
        assert_eq!(via, COMPAT, "{op}: {paths:#?}");
        assert_eq!(*transport, Transport::HostStaged, "{op}");
        assert_eq!(*bytes, moved(sum, op), "{op}: the path's bytes are the I/O");
        assert_eq!(
            *staged,
            moved(sum, op),
            "{op}: every byte staged, counted from pread/pwrite"
        );
        let cause = cause.as_deref().unwrap_or_default();
        assert!(cause.starts_with("nvidia-fs not loaded"), "{op}: {cause}");
    }
    // explain says it too.
    let o = run(&["explain", s(&t.json)]);
    assert!(o.status.success(), "explain: {}", stderr(&o));
    assert!(stdout(&o).contains("gds-nvidia-fs-not-loaded"), "{}", stdout(&o));
    // cuFile's log, as libcufile writes it without nvidia-fs, agrees.
    let log = t.dir.join("cufile.log");
    let line = format!(
        " 07-12-2026 03:20:00:1 [pid={0} tid={0}] NOTICE  cufio-drv:720 GDS not supported or disabled by config, using cuFile posix read/write with compat mode enabled\n",
        sum.pid
    );
    std::fs::write(&log, line).expect("writing the log");
    let o = run(&["explain", s(&t.json), "--cufile-log", s(&log)]);
    assert!(o.status.success(), "explain --cufile-log: {}", stderr(&o));
    assert!(
        stdout(&o).contains("cuFile's log agrees with the tracer's file paths"),
        "{}",
        stdout(&o)
    );
    // The recording replays to the same paths.
    let out = t.dir.join("replayed.json");
    let o = run(&["replay", s(&t.rec), "--json", s(&out)]);
    assert!(o.status.success(), "replay: {}", stderr(&o));
    assert_eq!(file_paths(&read_report(&out), sum.pid), paths);
}

#[test]
fn direct_shape_is_gds_direct_and_compare_flags_compat() {
    if !can_trace("direct_shape_is_gds_direct_and_compare_flags_compat") {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = traced("direct", true);
    let paths = file_paths(&d.report, d.summary.pid);
    assert_eq!(paths.len(), 2, "a write and a read path on the file: {paths:#?}");
    for (op, via, transport, bytes, staged, ..) in &paths {
        assert_eq!(via, DIRECT, "{op}: {paths:#?}");
        assert_eq!(*transport, Transport::GpuDirectStorage, "{op}");
        assert_eq!(*bytes, moved(&d.summary, op), "{op}");
        assert_eq!(*staged, 0, "{op}: nothing through host memory");
    }
    let c = traced("regressed", false);
    let base = d.dir.join("baseline.json");
    let o = run(&["baseline", "record", "--from", s(&d.json), "--out", s(&base)]);
    assert!(o.status.success(), "baseline record: {}", stderr(&o));
    let o = run(&["compare", s(&base), s(&c.json)]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{}", stderr(&o));
    // Every file path of the direct run that the compat run has too (same
    // op and memory) is named: gpudirect-storage became host-staged.
    let compat = file_paths(&c.report, c.summary.pid);
    for (op, .., memory) in &paths {
        if !compat.iter().any(|x| &x.0 == op && &x.6 == memory) {
            continue;
        }
        let row = format!("path gdrtrace {op} file {memory} gpudirect-storage x1 -> host-staged x1");
        assert!(
            out.contains(&row),
            "no `{row}`: {out}\ndirect {paths:#?}\ncompat {compat:#?}"
        );
    }
    assert!(
        compat
            .iter()
            .filter(|x| paths.iter().any(|p| p.0 == x.0 && p.6 == x.6))
            .count()
            == 2,
        "both directions comparable: direct {paths:#?}\ncompat {compat:#?}"
    );
    // And the same run against itself is none.
    let o = run(&["compare", s(&base), s(&d.json)]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
}

#[test]
fn attach_mid_run_sees_the_compat_reads_of_a_handle_registered_before() {
    if !can_trace("attach_mid_run_sees_the_compat_reads_of_a_handle_registered_before") {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let b = build("attach", false);
    let (data, summary, json) = (
        b.dir.join("data.bin"),
        b.dir.join("summary.json"),
        b.dir.join("attach.json"),
    );
    // Writes and reads (about 2 s with the settling), then 4 KiB reads for
    // 15 s: attach loads and attaches within it, even on a busy host.
    let mut child = Command::new(gdrtrace_path())
        .args(drive_args(&b, &data, &summary, &["--seconds", "15", "--block", "4K"]))
        .env("GDRTRACE_STANDIN_NVFS", &b.nvfs)
        .env_remove("CUFILE_FORCE_COMPAT_MODE")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("drive gds");
    std::thread::sleep(std::time::Duration::from_millis(3000));
    let o = Command::new(gdrtrace_path())
        .args(["attach", "--pid", &child.id().to_string(), "--collectives", "exact"])
        .args(["--duration", "2s", "--json", s(&json)])
        .output()
        .expect("gdrtrace attach");
    let status = child.wait().expect("the job");
    assert!(status.success(), "drive gds: {status:?}");
    assert!(o.status.success(), "attach: {}{}", stdout(&o), stderr(&o));
    let sum: GdsSummary = read_as(&summary);
    assert!(sum.loop_reads > 0, "{sum:?}");
    let r = read_report(&json);
    let paths = file_paths(&r, sum.pid);
    let read = paths
        .iter()
        .find(|p| p.0 == "file-read")
        .unwrap_or_else(|| panic!("no file-read path: {paths:#?}"));
    assert_eq!(read.1, COMPAT, "{paths:#?}");
    // The stand-in's "GPU" buffer is heap memory allocated before the
    // attach, and its copies are from a bounce buffer registered before
    // it: the tracer cannot tell the buffer's memory (`unknown`), but the
    // copies between GPU and host memory in the path's time carried its
    // bytes: staged either way.
    println!(
        "gds attach: the read path's memory is {}: {:?}, staged {} of {}",
        read.6, read.2, read.4, read.3
    );
    assert_eq!(read.2, Transport::HostStaged, "{paths:#?}");
    assert!(read.3 > 0 && read.3 % 4096 == 0, "4 KiB reads: {paths:#?}");
    assert!(
        read.3 < sum.loop_bytes,
        "only what moved while attached: {} of {}",
        read.3,
        sum.loop_bytes
    );
    // The reads' own pread bytes stage them, tick for tick (the first and
    // last ticks may split a read from its pread).
    let (bytes, staged) = (read.3 as f64, read.4 as f64);
    assert!((staged - bytes).abs() <= 0.05 * bytes, "staged {staged} of {bytes}");
    let cause = read.5.as_deref().unwrap_or_default();
    assert!(cause.starts_with("nvidia-fs not loaded"), "{cause}");
}
