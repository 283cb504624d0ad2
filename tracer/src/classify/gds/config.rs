//! cuFile's configuration, `cufile.json`: where `CUFILE_ENV_PATH_JSON` (the
//! process's environment) or the default locations say, JSON with `//`
//! comments. Only what decides a path is kept: whether compat mode is
//! allowed, P2PDMA, unaligned writes through POSIX, the minimum I/O size
//! cuFile sends to GPUDirect per filesystem, and the deny lists.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The files cuFile reads when `CUFILE_ENV_PATH_JSON` is not set, in order.
pub const DEFAULT_PATHS: [&str; 2] = ["/etc/cufile.json", "/usr/local/cuda/gds/cufile.json"];

/// The settings of `cufile.json` that decide a path.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct CufileConfig {
    /// Where it was read (inside the process's mount namespace).
    pub path: String,
    /// `properties.allow_compat_mode`: cuFile falls back to POSIX I/O
    /// through host memory (instead of failing) where GDS cannot work.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_compat_mode: Option<bool>,
    /// `properties.use_pci_p2pdma`: the kernel's PCI P2PDMA instead of nvidia-fs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub use_pci_p2pdma: Option<bool>,
    /// `fs.generic.posix_unaligned_writes`: unaligned writes go through POSIX.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub posix_unaligned_writes: Option<bool>,
    /// `fs.<name>.posix_gds_min_kb`: I/O below this goes through POSIX.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub posix_gds_min_kb: BTreeMap<String, u64>,
    /// `properties.max_direct_io_size_kb`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_direct_io_size_kb: Option<u64>,
    /// `execution.max_io_threads`: compat mode's I/O threads (each with
    /// its bounce buffer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_io_threads: Option<u64>,
    /// `denylist.{drivers,devices,mounts,filesystems}`: never GDS there.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub denylist: BTreeMap<String, Vec<String>>,
    /// `logging.dir`: where cuFile writes `cufile.log` (the working
    /// directory when unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logging_dir: Option<String>,
    /// Why the file could not be read as JSON, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The text without `//` and `/* */` comments (outside strings): cufile.json
/// ships with comments, which JSON does not allow.
pub fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let (mut in_string, mut escaped) = (false, false);
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut last = ' ';
                for n in chars.by_ref() {
                    if last == '*' && n == '/' {
                        break;
                    }
                    last = n;
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// Parses a cufile.json read from `path`; a file that is not JSON keeps
/// its error (cuFile itself would refuse it and use its defaults).
pub fn parse(path: &str, text: &str) -> CufileConfig {
    let mut c = CufileConfig {
        path: path.to_string(),
        ..CufileConfig::default()
    };
    let v: serde_json::Value = match serde_json::from_str(&strip_comments(text)) {
        Ok(v) => v,
        Err(e) => {
            c.error = Some(format!("not JSON once comments are removed: {e}"));
            return c;
        }
    };
    let b = |p: &str| v.pointer(p).and_then(serde_json::Value::as_bool);
    let n = |p: &str| v.pointer(p).and_then(serde_json::Value::as_u64);
    c.allow_compat_mode = b("/properties/allow_compat_mode");
    c.use_pci_p2pdma = b("/properties/use_pci_p2pdma");
    c.posix_unaligned_writes = b("/fs/generic/posix_unaligned_writes");
    c.max_direct_io_size_kb = n("/properties/max_direct_io_size_kb");
    c.max_io_threads = n("/execution/max_io_threads");
    c.logging_dir = v
        .pointer("/logging/dir")
        .and_then(serde_json::Value::as_str)
        .map(String::from);
    if let Some(fs) = v.get("fs").and_then(serde_json::Value::as_object) {
        for (name, f) in fs {
            if let Some(kb) = f.get("posix_gds_min_kb").and_then(serde_json::Value::as_u64) {
                c.posix_gds_min_kb.insert(name.clone(), kb);
            }
        }
    }
    if let Some(d) = v.get("denylist").and_then(serde_json::Value::as_object) {
        for (k, list) in d {
            let items: Vec<String> = list
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|x| x.as_str().map(String::from))
                .filter(|x| !x.is_empty())
                .collect();
            if !items.is_empty() {
                c.denylist.insert(k.clone(), items);
            }
        }
    }
    c
}

/// The file cuFile reads for a process: `CUFILE_ENV_PATH_JSON`, else the
/// first default that exists (`exists` answers inside its mount namespace).
pub fn path_for(env: &BTreeMap<String, String>, exists: impl Fn(&str) -> bool) -> Option<String> {
    if let Some(p) = env.get("CUFILE_ENV_PATH_JSON").filter(|p| !p.is_empty()) {
        return Some(p.clone());
    }
    DEFAULT_PATHS.iter().find(|p| exists(p)).map(|p| p.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of the cufile.json CUDA 13.0 installs (abridged), with its
    /// comments and a `//` inside a string.
    const SAMPLE: &str = r#"{
    // NOTE : Application can override custom configuration via export CUFILE_ENV_PATH_JSON=<filepath>
    // e.g : export CUFILE_ENV_PATH_JSON="/home/<xxx>/cufile.json"
    "logging": {
        // log directory, if not enabled will create log file under current working directory
        //"dir": "/home/<xxxx>",
        "level": "ERROR"
    },
    "execution" : {
        "max_io_threads" : 4, // max number of host threads per gpu
        "parallel_io" : true
    },
    "properties": {
        "max_direct_io_size_kb" : 16384,
        /* allow compat mode, this will enable use of cuFile posix read/writes */
        "allow_compat_mode": true,
        "use_pci_p2pdma": false,
        "rdma_dev_addr_list": [ "http://x//y" ]
    },
    "fs": {
        "generic": { "posix_unaligned_writes" : false },
        "lustre": { "posix_gds_min_kb" : 0 },
        "beegfs": { "posix_gds_min_kb" : 4 }
    },
    "denylist": { "drivers": [ ], "mounts": [ "/mnt/slow" ], "filesystems": [ ] }
}"#;

    #[test]
    fn reads_cufile_json_with_comments() {
        let c = parse("/etc/cufile.json", SAMPLE);
        assert_eq!(c.error, None);
        assert_eq!(c.allow_compat_mode, Some(true));
        assert_eq!(c.use_pci_p2pdma, Some(false));
        assert_eq!(c.posix_unaligned_writes, Some(false));
        assert_eq!(c.max_io_threads, Some(4));
        assert_eq!(c.max_direct_io_size_kb, Some(16384));
        assert_eq!(c.posix_gds_min_kb.get("beegfs"), Some(&4));
        assert_eq!(c.denylist.get("mounts"), Some(&vec!["/mnt/slow".to_string()]));
        assert!(!c.denylist.contains_key("drivers"), "empty lists are not kept");
        assert_eq!(c.logging_dir, None, "a commented-out setting is not read");
        let bad = parse("/x.json", "{ \"properties\": ");
        assert!(bad.error.is_some());
    }

    #[test]
    fn the_file_cufile_reads() {
        let mut env = BTreeMap::new();
        assert_eq!(
            path_for(&env, |p| p == "/usr/local/cuda/gds/cufile.json").as_deref(),
            Some("/usr/local/cuda/gds/cufile.json")
        );
        assert_eq!(path_for(&env, |_| false), None);
        env.insert("CUFILE_ENV_PATH_JSON".into(), "/opt/my.json".into());
        assert_eq!(path_for(&env, |_| true).as_deref(), Some("/opt/my.json"));
    }
}
