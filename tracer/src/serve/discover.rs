//! Which processes are GPU or RDMA processes. New ones are found in the
//! kernel (`tracer-ebpf/src/discover.rs`: an `open`/`openat` of a device
//! node or a library of the table); the ones already running when the
//! agent starts are found here, in `/proc`, by the same matcher
//! (`tracer_common::discover::match_path`) applied to what they map and
//! the files they hold open.
use std::{fs, os::unix::ffi::OsStrExt as _};

use tracer_common::discover::{self, match_bytes};

/// The name of a discovery reason, as the metrics label it.
pub fn reason_name(reason: u32) -> &'static str {
    match reason {
        discover::LIBCUDA => "libcuda",
        discover::LIBNCCL => "libnccl",
        discover::LIBIBVERBS => "libibverbs",
        discover::DEV_NVIDIA => "dev-nvidia",
        discover::DEV_INFINIBAND => "dev-infiniband",
        discover::PROC_SCAN => "proc-scan",
        _ => "fork",
    }
}

/// Every reason a discovery can carry (so the metric lists each, zero or not).
pub const REASONS: [u32; 6] = [
    discover::LIBCUDA,
    discover::LIBNCCL,
    discover::LIBIBVERBS,
    discover::DEV_NVIDIA,
    discover::DEV_INFINIBAND,
    discover::PROC_SCAN,
];

/// Why `pid` is a GPU or RDMA process, from its maps and open files.
pub fn reason_of(pid: u32) -> Option<u32> {
    if let Ok(maps) = fs::read_to_string(format!("/proc/{pid}/maps")) {
        let hit = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .map(|p| match_bytes(p.as_bytes()))
            .find(|r| *r != discover::NONE);
        if hit.is_some() {
            return hit;
        }
    }
    let fds = fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    fds.flatten()
        .filter_map(|e| fs::read_link(e.path()).ok())
        .map(|target| match_bytes(target.as_os_str().as_bytes()))
        .find(|r| *r != discover::NONE)
}

/// Running GPU or RDMA processes (the agent itself aside).
pub fn scan(agent: u32) -> Vec<(u32, u32)> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out: Vec<(u32, u32)> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != agent)
        .filter_map(|pid| Some((pid, reason_of(pid)?)))
        .collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use tracer_common::discover::*;

    #[test]
    fn the_matcher_names_devices_and_library_files() {
        for (path, want) in [
            ("/dev/nvidia0", DEV_NVIDIA),
            ("/dev/nvidiactl", DEV_NVIDIA),
            ("/dev/nvidia-uvm", DEV_NVIDIA),
            ("/dev/infiniband/uverbs0", DEV_INFINIBAND),
            ("/usr/lib/x86_64-linux-gnu/libcuda.so.1", LIBCUDA),
            ("/usr/local/nvidia/lib64/libcuda.so.580.159.04", LIBCUDA),
            ("libcuda.so", LIBCUDA),
            (
                "/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2",
                LIBNCCL,
            ),
            ("/lib/x86_64-linux-gnu/libibverbs.so.1.14.50.0", LIBIBVERBS),
            ("/usr/lib/x86_64-linux-gnu/libcudart.so.12", NONE),
            ("/usr/lib/libcuda.so-backup", NONE),
            ("/usr/lib/libnccl-net.so", NONE),
            ("/etc/ld.so.cache", NONE),
            ("/dev/null", NONE),
            ("/dev/infiniband", NONE),
            ("/home/u/dev/nvidia0", NONE),
            ("/usr/lib/libcuda.so/", NONE),
            ("", NONE),
        ] {
            assert_eq!(match_bytes(path.as_bytes()), want, "{path}");
        }
    }

    #[test]
    fn only_the_path_length_is_read() {
        // The kernel reuses one buffer per CPU: a short path written over a
        // longer one leaves the old tail behind it.
        let mut buf = [0u8; PATH_BYTES];
        let old = b"/usr/lib/x86_64-linux-gnu/libcuda.so.1";
        buf[..old.len()].copy_from_slice(old);
        let new = b"/usr/lib/x86_64-linux-gnu/";
        buf[..new.len()].copy_from_slice(new);
        assert_eq!(match_path(&buf, new.len()), NONE);
        assert_eq!(match_path(&buf, old.len()), LIBCUDA);
        // A path cut at the buffer's end: the name is past the bytes read.
        let long = format!("/{}/libnccl.so.2", "d".repeat(PATH_BYTES));
        assert_eq!(match_bytes(long.as_bytes()), NONE);
        let edge = format!("/{}/libnccl.so", "d".repeat(PATH_BYTES - 13));
        assert_eq!(edge.len(), PATH_BYTES - 1);
        assert_eq!(match_bytes(edge.as_bytes()), LIBNCCL);
        // File names longer than NAME_BYTES are none of the table's.
        let named = format!("/x/libnccl.so.{}", "9".repeat(NAME_BYTES));
        assert_eq!(match_bytes(named.as_bytes()), NONE);
        let short_dir = format!("libibverbs.so.1.{}", "0".repeat(NAME_BYTES - 20));
        assert_eq!(
            match_bytes(short_dir.as_bytes()),
            LIBIBVERBS,
            "no '/' within reach: the name starts at 0"
        );
    }

    #[test]
    fn this_process_maps_libibverbs() {
        // The test binary links libibverbs (through rdma-sys), as gdrtrace does.
        let me = std::process::id();
        assert_eq!(super::reason_of(me), Some(LIBIBVERBS));
        assert!(super::scan(0).iter().any(|(p, _)| *p == me));
        assert!(
            !super::scan(me).iter().any(|(p, _)| *p == me),
            "the agent never finds itself"
        );
    }
}
