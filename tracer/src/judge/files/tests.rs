//! The file paths' rules on small jobs: P2PDMA or not, a handle
//! registered before tracing began (attach), I/O too small or unaligned
//! for GPUDirect, and a direct path whose time held host bytes.
use super::*;
use crate::{
    classify::tests_support::Job,
    counters::{O_DIRECT, OpenFile},
    host::GdsHost,
    stats::source::Fact,
};

const P: u32 = 5100;
const MIB: u64 = 1 << 20;
const DPTR: u64 = 0x7f10_0000_0000;
const FH: u64 = 0x5555_0000_2000;
const FD: u64 = 9;

fn nvme_file() -> OpenFile {
    OpenFile {
        path: "/mnt/nvme/shard.bin".into(),
        dev: "259:1".into(),
        ino: 42,
        fs_type: "ext4".into(),
        mount_source: "/dev/nvme0n1".into(),
        mount_point: "/mnt/nvme".into(),
        mount_options: "rw,relatime,rw,data=ordered".into(),
        flags: 0o2 | O_DIRECT,
        ..OpenFile::default()
    }
}

fn facts() -> HostFacts {
    HostFacts {
        gds: Some(GdsHost {
            nvidia_fs: true,
            devices: vec!["/dev/nvidia-fs0".into()],
            version: None,
        }),
        ..HostFacts::default()
    }
}

struct Shape {
    /// cufile.json's `properties.use_pci_p2pdma`.
    p2pdma: bool,
    /// Whether the handle's registration is seen (else: attached after).
    registered: bool,
    /// The first read's size and file offset.
    first: (u64, u64),
    /// Bytes copied between GPU and host in the reads' time.
    host_copies: u64,
}

/// Eight 4 MiB reads of a file on NVMe, their pread bytes, and the copies asked for.
fn reads(s: Shape) -> Job {
    let mut j = Job::new();
    j.process(P, Vec::new());
    j.call(P, "cuMemAlloc", &[DPTR, 64 * MIB]);
    let config = format!(r#"{{"properties": {{"use_pci_p2pdma": {}}}}}"#, s.p2pdma);
    j.facts(vec![
        Fact::Cufile {
            pid: P,
            config: Some(crate::classify::gds::config::parse("/etc/cufile.json", &config)),
        },
        Fact::File {
            pid: P,
            fd: FD as i32,
            file: Some(nvme_file()),
        },
    ]);
    if s.registered {
        j.call(P, "cuFileDriverOpen", &[]);
        j.call(P, "cuFileHandleRegister", &[FH, 0x7ffc_0000_0100, 0, 0, 0, FD]);
    }
    j.entry(P, "cuFileRead", &[FH, DPTR, s.first.0, s.first.1, 0], s.first.0 as i64);
    if s.host_copies > 0 {
        j.call(P, "cuMemHostAlloc", &[0x7f30_0000_0000, s.host_copies, 0]);
        j.call(P, "cuMemcpyHtoDAsync", &[DPTR, 0x7f30_0000_0000, s.host_copies, 0]);
    }
    j.aggregates(&[(P, "cuFileRead", FH, 8, 32 * MIB), (P, "pread64", FD, 8, 32 * MIB)]);
    j
}

fn shape() -> Shape {
    Shape {
        p2pdma: true,
        registered: true,
        first: (4 * MIB, 0),
        host_copies: 0,
    }
}

fn the_path(j: &Job) -> Path {
    let r = j.report_with(facts());
    let mut v: Vec<Path> = r.paths.into_iter().filter(|p| p.peer_kind == PeerKind::File).collect();
    assert_eq!(v.len(), 1, "{v:#?}");
    v.remove(0)
}

/// POSIX reads straight into GPU memory with P2PDMA enabled: direct.
#[test]
fn posix_io_on_gpu_memory_with_p2pdma_is_direct() {
    let p = the_path(&reads(shape()));
    assert_eq!(
        (p.transport, p.via.as_str()),
        (Transport::GpuDirectStorage, Via::P2pdma.name()),
        "{p:#?}"
    );
    assert_eq!((p.peer.as_str(), p.basis), ("/mnt/nvme/shard.bin", Basis::SetUp));
    // The same I/O without P2PDMA configured or seen: not called direct.
    let p = the_path(&reads(Shape {
        p2pdma: false,
        ..shape()
    }));
    assert_eq!(p.transport, Transport::Ambiguous, "{p:#?}");
}

/// Attached after the handle was registered: the file is the one whose
/// I/O ran in the path's time, judged from the steady state.
#[test]
fn a_handle_registered_before_tracing_is_named_by_its_io() {
    let p = the_path(&reads(Shape {
        registered: false,
        host_copies: 32 * MIB,
        ..shape()
    }));
    assert_eq!(p.peer, "/mnt/nvme/shard.bin", "{p:#?}");
    assert_eq!(p.basis, Basis::SteadyState);
    assert_eq!(
        (p.transport, p.staged_bytes),
        (Transport::HostStaged, 32 * MIB),
        "{p:#?}"
    );
    assert!(
        p.evidence.iter().any(|e| e.contains("registered before tracing began")),
        "{:?}",
        p.evidence
    );
}

/// Compat mode on a supported file for small or unaligned I/O.
#[test]
fn unaligned_io_falls_back_with_its_cause() {
    let p = the_path(&reads(Shape {
        first: (4096, 100),
        host_copies: 32 * MIB,
        ..shape()
    }));
    assert_eq!(p.transport, Transport::HostStaged);
    let c = p.cause.as_deref().expect("a cause");
    assert_eq!(Cause::of_sentence(c), Some(Cause::SmallOrUnaligned), "{c}");
    assert!(c.contains("at file offset 100"), "{c}");
    // Aligned: nothing explains it here.
    let p = the_path(&reads(Shape {
        host_copies: 32 * MIB,
        ..shape()
    }));
    assert_eq!(
        Cause::of_sentence(p.cause.as_deref().unwrap()),
        Some(Cause::Undetermined)
    );
}

/// A direct path never takes host bytes it may have moved: a copy of more
/// than a tenth of its bytes in its time makes it compat, whatever P2PDMA.
#[test]
fn host_copies_in_its_time_are_not_direct() {
    let p = the_path(&reads(Shape {
        host_copies: 8 * MIB,
        ..shape()
    }));
    assert_eq!(
        (p.transport, p.via.as_str()),
        (Transport::HostStaged, Via::Compat.name()),
        "{p:#?}"
    );
    let p = the_path(&reads(Shape {
        host_copies: MIB,
        ..shape()
    }));
    assert_eq!(p.transport, Transport::GpuDirectStorage, "a copy below a tenth: {p:#?}");
}
