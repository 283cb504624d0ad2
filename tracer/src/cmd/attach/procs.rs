//! Which processes `attach` targets: a pid's descendants, a cgroup's
//! members, the processes of a command name (from /proc).
use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
};

use crate::{
    counters,
    error::{Error, Result},
};

/// Every process: pid → parent pid.
pub(super) fn process_table() -> Vec<(u32, u32)> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect()
}

/// `pids` and all their descendants.
pub fn with_descendants(pids: &[u32]) -> BTreeSet<u32> {
    let table = process_table();
    let mut set: BTreeSet<u32> = pids.iter().copied().collect();
    loop {
        let before = set.len();
        for (pid, ppid) in &table {
            if set.contains(ppid) {
                set.insert(*pid);
            }
        }
        if set.len() == before {
            return set;
        }
    }
}

/// Members of a cgroup v2 (path absolute or relative to /sys/fs/cgroup),
/// including its child cgroups.
pub fn cgroup_members(path: &Path) -> Result<Vec<u32>> {
    let dir = if path.is_absolute() {
        path.to_path_buf()
    } else {
        PathBuf::from("/sys/fs/cgroup").join(path)
    };
    // Only a directory of the cgroup file system itself: any other
    // directory holding a file named cgroup.procs would pick the pids it
    // lists (a user's file naming another user's processes).
    match fs_magic(&dir) {
        Ok(CGROUP2_SUPER_MAGIC | CGROUP_SUPER_MAGIC) => {}
        Ok(_) => {
            return Err(Error::Usage(format!(
                "--cgroup {}: not a cgroup directory (not on a cgroup2 or cgroup v1 mount)",
                dir.display()
            )));
        }
        Err(e) => {
            return Err(Error::Usage(format!(
                "--cgroup {}: not a cgroup directory: {}",
                dir.display(),
                crate::error::describe(&e)
            )));
        }
    }
    if !dir.join("cgroup.procs").is_file() {
        return Err(Error::Usage(format!(
            "--cgroup {}: not a cgroup directory (no cgroup.procs)",
            dir.display()
        )));
    }
    let mut out = Vec::new();
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        if let Ok(text) = fs::read_to_string(d.join("cgroup.procs")) {
            out.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        }
        if let Ok(entries) = fs::read_dir(&d) {
            stack.extend(
                entries
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.join("cgroup.procs").is_file()),
            );
        }
    }
    Ok(out)
}

/// statfs(2)'s `f_type` of the file system holding `dir`.
fn fs_magic(dir: &Path) -> std::io::Result<i64> {
    use std::os::unix::ffi::OsStrExt as _;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: statfs(2) on a NUL-terminated path into a zeroed struct we own.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st.f_type as i64)
}

/// `f_type` of cgroup2 and of a cgroup v1 hierarchy (include/uapi/linux/magic.h).
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;

/// The longest command name the kernel keeps (TASK_COMM_LEN - 1): longer
/// names are cut, so `--comm` with a longer one never matches.
pub(super) const COMM_MAX: usize = 15;

/// Processes whose command name is `comm`.
pub fn by_comm(comm: &str) -> Vec<u32> {
    process_table()
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| counters::comm(*p).as_deref() == Some(comm))
        .collect()
}
