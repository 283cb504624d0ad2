//! Finding the libraries a process really uses: from `/proc/PID/maps`,
//! opened through `/proc/PID/root` so processes in other mount namespaces
//! (containers) resolve to their own copies, identified by device and inode
//! so one file seen from two namespaces is attached once.
use std::{
    collections::BTreeSet,
    fs,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

use super::uapi::Lib;

/// A library file as seen by one process.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LibFile {
    pub lib: Lib,
    /// Path inside the process's mount namespace, as in its maps.
    pub path: String,
    /// Path the tracer opens (through `/proc/PID/root`).
    pub host_path: PathBuf,
    /// (device, inode): identity across namespaces.
    pub id: (u64, u64),
}

/// What a process maps: the libraries of the table, and the UCX transport
/// modules it loaded.
#[derive(Clone, Debug, Default)]
pub struct Mapped {
    pub libs: Vec<LibFile>,
    /// File names of UCX transport modules (`libuct_cuda.so.0`): UCX loads
    /// them from the `ucx/` directory beside its libraries at start-up, one
    /// per transport family it can use (cuda_copy/cuda_ipc, ib, cma, ...).
    pub ucx_modules: Vec<String>,
}

/// A UCX transport or memory-hook module (`.../ucx/libuct_cuda.so.0`), by path.
pub fn ucx_module(path: &str) -> Option<&str> {
    let (dir, file) = path.rsplit_once('/')?;
    let in_ucx_dir = dir.rsplit('/').next() == Some("ucx");
    (in_ucx_dir && (file.starts_with("libuct_") || file.starts_with("libucm_")) && file.contains(".so")).then_some(file)
}

/// Libraries of the table mapped by `pid`, and its UCX modules.
pub fn mapped(pid: u32) -> std::io::Result<Mapped> {
    let maps = fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let mut seen = BTreeSet::new();
    let mut out = Mapped::default();
    for line in maps.lines() {
        let Some(path) = line.split_whitespace().nth(5) else {
            continue;
        };
        if !path.starts_with('/') || !seen.insert(path.to_string()) {
            continue;
        }
        if let Some(m) = ucx_module(path) {
            out.ucx_modules.push(m.to_string());
            continue;
        }
        let Some(lib) = Lib::of_path(path) else { continue };
        let host_path = PathBuf::from(format!("/proc/{pid}/root{path}"));
        if let Ok(meta) = fs::metadata(&host_path) {
            out.libs.push(LibFile {
                lib,
                path: path.to_string(),
                host_path,
                id: (meta.dev(), meta.ino()),
            });
        }
    }
    Ok(out)
}

/// Libraries of the table installed on this host (ld cache and the usual
/// driver directories), for commands started by the tracer: they can be
/// attached before the command runs, so nothing before attach is missed.
pub fn installed() -> Vec<LibFile> {
    let mut paths: BTreeSet<PathBuf> = BTreeSet::new();
    if let Ok(out) = std::process::Command::new("ldconfig").arg("-p").output() {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some((_, p)) = line.split_once("=> ") {
                paths.insert(PathBuf::from(p.trim()));
            }
        }
    }
    for dir in [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/nvidia/lib64",
        "/usr/local/cuda/lib64",
        // The CUDA toolkit's libcufile.so.0, where no ld.so.conf names it.
        "/usr/local/cuda/targets/x86_64-linux/lib",
    ] {
        if let Ok(entries) = fs::read_dir(dir) {
            paths.extend(entries.flatten().map(|e| e.path()));
        }
    }
    let mut ids = BTreeSet::new();
    let mut out = Vec::new();
    for p in paths {
        let Some(s) = p.to_str() else { continue };
        let Some(lib) = Lib::of_path(s) else { continue };
        // Resolve symlinks (libcuda.so.1 -> libcuda.so.580.x) and dedup.
        let Ok(real) = fs::canonicalize(&p) else { continue };
        let Ok(meta) = fs::metadata(&real) else { continue };
        if ids.insert((meta.dev(), meta.ino())) {
            out.push(LibFile {
                lib,
                path: real.display().to_string(),
                host_path: real,
                id: (meta.dev(), meta.ino()),
            });
        }
    }
    out
}

/// The identity of a file (device, inode).
pub fn file_id(path: &Path) -> std::io::Result<(u64, u64)> {
    let m = fs::metadata(path)?;
    Ok((m.dev(), m.ino()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn ucx_modules_by_path() {
        use super::ucx_module;
        assert_eq!(
            ucx_module("/usr/lib/x86_64-linux-gnu/ucx/libuct_ib.so.0.0.0"),
            Some("libuct_ib.so.0.0.0")
        );
        assert_eq!(
            ucx_module("/venv/site-packages/libucx/lib/ucx/libuct_cuda.so.0"),
            Some("libuct_cuda.so.0")
        );
        assert_eq!(ucx_module("/venv/site-packages/libucx/lib/libuct.so.0"), None);
        assert_eq!(ucx_module("/opt/x/libuct_cuda.so.0"), None, "not in a ucx/ directory");
    }
}
