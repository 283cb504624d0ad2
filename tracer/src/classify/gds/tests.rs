//! cuFile processes through the aggregator into judged reports: the
//! shapes of the GPU machine's compat mode (2026-12-06, libcufile 1.15, no
//! nvidia-fs: four 16 MiB bounce buffers, pwrite/pread plus copies) and of
//! a direct path (nvidia-fs ioctls, no host bytes), a stand-in of what the
//! real driver does, which no machine here has.
use super::*;
use crate::{
    classify::{Transport, path::OpClass, tests_support::Job},
    host::{GdsHost, HostFacts},
    stats::source::Fact,
};

const P: u32 = 4200;
const MIB: u64 = 1 << 20;
const DPTR: u64 = 0x7f10_0000_0000;
const BOUNCE: u64 = 0x7f20_0000_0000;
const FH: u64 = 0x5555_0000_1000;
const DESCR: u64 = 0x7ffc_0000_0100;
const FD: u64 = 46;
const NVFS_FD: u64 = 12;

fn data_file(o_direct: bool) -> crate::counters::OpenFile {
    crate::counters::OpenFile {
        path: "/data/ckpt.bin".into(),
        dev: "253:1".into(),
        ino: 1234,
        fs_type: "ext4".into(),
        mount_source: "/dev/vda".into(),
        mount_point: "/".into(),
        mount_options: "rw,relatime,rw".into(),
        flags: 0o2 | if o_direct { crate::counters::O_DIRECT } else { 0 },
        char_device: false,
        nvfs: false,
    }
}

fn nvfs_device() -> crate::counters::OpenFile {
    crate::counters::OpenFile {
        path: "/dev/nvidia-fs0".into(),
        dev: "0:5".into(),
        ino: 77,
        fs_type: "devtmpfs".into(),
        char_device: true,
        nvfs: true,
        ..Default::default()
    }
}

fn host(nvidia_fs: bool) -> HostFacts {
    HostFacts {
        gds: Some(GdsHost {
            nvidia_fs,
            devices: if nvidia_fs {
                vec!["/dev/nvidia-fs0".into()]
            } else {
                Vec::new()
            },
            version: None,
        }),
        ..HostFacts::default()
    }
}

/// A job that writes 64 MiB eight times and reads it back eight times.
/// `compat`: through four 16 MiB bounce buffers (pwrite/pread and copies),
/// else nvidia-fs ioctls only.
fn job(compat: bool, env: &[(&str, &str)], o_direct: bool) -> Job {
    job_ticks(compat, env, o_direct, false, true)
}

/// `job`, its writes and reads read by one tick of the kernel's totals
/// when `one_tick` (one window both paths carried), else a tick each;
/// without `set_up`, traced from after the driver's open and the handle's
/// registration (attach).
fn job_ticks(compat: bool, env: &[(&str, &str)], o_direct: bool, one_tick: bool, set_up: bool) -> Job {
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let mut j = Job::new();
    j.process(
        P,
        vec![Fact::Process {
            pid: P,
            parent: None,
            comm: Some("python3".into()),
            env,
        }],
    );
    j.call(P, "cuMemAlloc", &[DPTR, 64 * MIB]);
    if compat {
        for t in 0..4 {
            j.call(P, "cuMemHostRegister", &[BOUNCE + t * 32 * MIB, 16 * MIB, 0]);
        }
    }
    let config = super::config::parse("/etc/cufile.json", r#"{"properties": {"allow_compat_mode": true}}"#);
    j.facts(vec![
        Fact::Cufile {
            pid: P,
            config: Some(config),
        },
        Fact::File {
            pid: P,
            fd: FD as i32,
            file: Some(data_file(o_direct)),
        },
        Fact::File {
            pid: P,
            fd: NVFS_FD as i32,
            file: Some(nvfs_device()),
        },
    ]);
    if set_up {
        j.call(P, "cuFileDriverOpen", &[]);
        j.call(P, "cuFileHandleRegister", &[FH, DESCR, 0, 0, 0, FD]);
    }
    for (op, copy) in [
        ("cuFileWrite", "cuMemcpyDtoHAsync"),
        ("cuFileRead", "cuMemcpyHtoDAsync"),
    ] {
        j.entry(P, op, &[FH, DPTR, 64 * MIB, 0, 0], (64 * MIB) as i64);
        if compat {
            for i in 0..32 {
                let (bounce, dev) = (BOUNCE + (i % 4) * 32 * MIB, DPTR + (i % 4) * 16 * MIB);
                let args = if copy.contains("DtoH") {
                    [bounce, dev, 16 * MIB, 0]
                } else {
                    [dev, bounce, 16 * MIB, 0]
                };
                j.call(P, copy, &args);
            }
        }
        let (w, r) = (op == "cuFileWrite", op == "cuFileRead");
        let mut rows = vec![(P, "cuFileWrite", FH, 8, 512 * MIB)];
        if r {
            rows.push((P, "cuFileRead", FH, 8, 512 * MIB));
        }
        if compat {
            rows.push((P, "pwrite64", FD, 32, 512 * MIB));
            if r {
                rows.push((P, "pread64", FD, 32, 512 * MIB));
            }
        } else {
            rows.push((P, "ioctl", NVFS_FD, if w { 8 } else { 16 }, 0));
        }
        // The rows are cumulative: the reads' tick holds the writes' too.
        if r || !one_tick {
            j.aggregates(&rows);
        }
    }
    j
}

/// Reads and writes that share their windows share the copies by their
/// POSIX I/O: both compat, each with its own bytes staged (on the GPU
/// machine both were `ambiguous`, "no copies through host memory"; there
/// torch.cuda.gds's 8 writes and 8 reads of 64 MiB took 0.45 s, one tick).
#[test]
fn reads_and_writes_in_one_tick_share_its_copies_by_their_posix_io() {
    let r = job_ticks(true, &[], true, true, true).report_with(host(false));
    each_compat_with_its_bytes_staged(&file_paths(&r));
}

/// Two file paths, each compat with its own 512 MiB staged.
fn each_compat_with_its_bytes_staged(paths: &[&crate::classify::path::Path]) {
    assert_eq!(paths.len(), 2, "{paths:#?}");
    for x in paths {
        assert_eq!(
            (x.transport, x.via.as_str()),
            (Transport::HostStaged, Via::Compat.name()),
            "{x:#?}"
        );
        assert_eq!((x.bytes, x.staged_bytes), (512 * MIB, 512 * MIB), "{x:#?}");
    }
}

/// The same one tick, attached after the handle's registration: each path
/// takes the one file with I/O in its direction in the window it shares,
/// and both are compat with their own bytes staged (on the H100 an
/// attached torch.cuda.gds job's write path was `unknown`: "no ... POSIX
/// I/O of the file ... seen in its time", its read path 100 of 512 MiB).
#[test]
fn attached_after_set_up_shared_windows_name_the_file_by_its_io() {
    let r = job_ticks(true, &[], true, true, false).report_with(host(false));
    let paths = file_paths(&r);
    each_compat_with_its_bytes_staged(&paths);
    for x in &paths {
        assert!(
            !x.peer.starts_with("handle"),
            "named by its handle, not its file: {x:#?}"
        );
    }
    assert_eq!(paths[0].peer, paths[1].peer, "{paths:#?}");
}

fn file_paths(r: &crate::report::Report) -> Vec<&crate::classify::path::Path> {
    r.paths.iter().filter(|p| p.peer_kind == PeerKind::File).collect()
}

use crate::classify::path::PeerKind;

/// The GPU machine's compat run: every byte through host memory, the
/// bytes staged counted from the file's POSIX I/O, the cause nvidia-fs.
#[test]
fn compat_mode_is_host_staged_with_the_bytes_of_its_posix_io() {
    let r = job(true, &[], true).report_with(host(false));
    let g = r.gds.as_ref().expect("a gds section");
    let p = g.process(P).expect("the cuFile process");
    assert_eq!((p.driver_opens, p.bounce_buffers, p.bounce_bytes), (1, 4, 64 * MIB));
    let f = p.file_of(&format!("{FH:#x}")).expect("the handle's file");
    assert_eq!((f.write_bytes, f.read_bytes), (512 * MIB, 512 * MIB), "{f:?}");
    let paths = file_paths(&r);
    assert_eq!(paths.len(), 2, "{paths:#?}");
    for x in &paths {
        assert_eq!(x.peer, "/data/ckpt.bin");
        assert_eq!(x.memory, "cuda");
        assert_eq!(
            (x.transport, x.via.as_str()),
            (Transport::HostStaged, Via::Compat.name()),
            "{x:#?}"
        );
        assert!(x.host_staged);
        assert_eq!(
            (x.bytes, x.staged_bytes, x.host_bytes),
            (512 * MIB, 512 * MIB, 512 * MIB),
            "{x:#?}"
        );
        let cause = x.cause.as_deref().expect("a cause");
        assert_eq!(Cause::of_sentence(cause), Some(Cause::NvfsNotLoaded), "{cause}");
    }
    assert_eq!(
        paths.iter().map(|p| p.op).collect::<Vec<_>>(),
        vec![OpClass::FileRead, OpClass::FileWrite]
    );
    let v = r.verdicts.iter().find(|v| v.pid == P).expect("a verdict");
    assert_eq!(v.transport, Transport::HostStaged);
    assert!(r.explain.fired("gds-nvidia-fs-not-loaded"), "{:#?}", r.explain);
    let staged = r.processes.iter().find(|x| x.pid == P).map(|x| x.staged_bytes);
    assert_eq!(
        staged,
        Some(1024 * MIB),
        "the files' staged bytes in the process's accounting"
    );
}

/// The causes in the order cuFile decides them: the environment first,
/// then the driver, then the file.
#[test]
fn compat_causes_in_order() {
    let cause = |j: Job, facts: HostFacts| {
        let r = j.report_with(facts);
        let c = file_paths(&r)[0].cause.clone().expect("a cause");
        Cause::of_sentence(&c).expect("a known cause")
    };
    assert_eq!(
        cause(job(true, &[("CUFILE_FORCE_COMPAT_MODE", "true")], true), host(true)),
        Cause::ForcedCompat
    );
    assert_eq!(cause(job(true, &[], false), host(true)), Cause::NotODirect);
    // nvidia-fs loaded, O_DIRECT, but ext4 on a virtio disk.
    assert_eq!(cause(job(true, &[], true), host(true)), Cause::FsUnsupported);
    // Without the host's nvidia-fs fact (reports older than it), the file decides.
    assert_eq!(cause(job(true, &[], true), HostFacts::default()), Cause::FsUnsupported);
}

/// nvidia-fs's ioctls and no byte through host memory: direct, and a
/// direct run against the compat one is a regression for `compare`.
#[test]
fn nvidia_fs_ioctls_without_host_bytes_are_direct() {
    let r = job(false, &[], true).report_with(host(true));
    let paths = file_paths(&r);
    assert_eq!(paths.len(), 2, "{paths:#?}");
    for x in &paths {
        assert_eq!(
            (x.transport, x.via.as_str()),
            (Transport::GpuDirectStorage, Via::Nvfs.name()),
            "{x:#?}"
        );
        assert!(!x.host_staged && x.staged_bytes == 0 && x.host_bytes == 0, "{x:#?}");
        assert_eq!(x.cause, None);
    }
    assert!(!r.explain.fired("gds-nvidia-fs-not-loaded"));
    let compat = job(true, &[], true).report_with(host(false));
    let c = crate::compare::compare(&doc(&r), &doc(&compat), &crate::compare::Thresholds::default(), false)
        .expect("same profile");
    assert!(
        c.transport_changes
            .iter()
            .any(|t| t.what == "path python3 file-read file cuda"
                && t.baseline.starts_with("gpudirect-storage")
                && t.current.starts_with("host-staged")),
        "{:?}",
        c.transport_changes
    );
    assert_eq!(c.exit_code(), 1);
}

/// A saved report as `compare` reads it (one run, its own baseline).
fn doc(r: &crate::report::Report) -> crate::compare::Document {
    use crate::compare::{Document, Run, read_report, record, workload_name};
    let mut r = r.clone();
    r.host.kernel = "6.8.0-test".into();
    r.host.lockdown = "none".into();
    let v = serde_json::to_value(&r).expect("a report serializes");
    let typed = read_report(&v).expect("the report reads back");
    let (baseline, _) = record(
        vec![Run {
            workload: workload_name(&typed),
            report: v,
            repeats: Vec::new(),
        }],
        std::slice::from_ref(&typed),
        "test".into(),
    );
    Document {
        name: "t".into(),
        baseline,
        plain_report: false,
        reports: vec![typed],
        repeats: vec![Vec::new()],
    }
}
