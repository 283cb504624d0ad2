//! Kubernetes labels of a process without an API server: the pod UID and
//! container ID from its cgroup path, the names from the kubelet's log
//! directory on the node.
//!
//! Cgroup paths as the kubelet lays them out (cgroup v1 and v2 alike):
//! - systemd driver: `/kubepods.slice/kubepods-burstable.slice/
//!   kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope`
//!   (`crio-<id>.scope`, `docker-<id>.scope`);
//! - cgroupfs driver: `/kubepods/burstable/pod<uid>/<id>` (Guaranteed pods
//!   sit directly under `/kubepods`).
//!
//! Seen from a container with its own cgroup namespace the same path may
//! start with `/..`; only its components matter here.
//!
//! Names: the kubelet writes each container's log under
//! `<root>/pods/<namespace>_<pod>_<uid>/<container>/` and links it as
//! `<root>/containers/<pod>_<namespace>_<container>-<id>.log`. Namespaces
//! and pod names cannot hold `_` (DNS labels and subdomains), so both
//! split unambiguously. The root is `/var/log` on a node, configurable for
//! tests (`serve --kubelet-log-root`).
use std::{
    collections::HashMap,
    fs,
    path::PathBuf,
    time::{Duration, Instant},
};

/// What the cgroup path says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodRef {
    pub uid: String,
    pub container_id: Option<String>,
}

/// The Kubernetes labels of a process (empty strings: unknown).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodLabels {
    pub namespace: String,
    pub pod: String,
    pub container: String,
}

/// The pod of a `/proc/PID/cgroup` text, if the process is in one.
pub fn pod_of_cgroup(text: &str) -> Option<PodRef> {
    text.lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .find_map(pod_of_path)
}

fn pod_of_path(path: &str) -> Option<PodRef> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let at = parts.iter().position(|p| uid_of_component(p).is_some())?;
    let uid = uid_of_component(parts[at])?;
    let container_id = parts.get(at + 1).and_then(|c| container_of_component(c));
    Some(PodRef { uid, container_id })
}

/// `pod<uid>` (cgroupfs) or `kubepods[-<qos>]-pod<uid_with_underscores>.slice`.
fn uid_of_component(c: &str) -> Option<String> {
    let rest = match c.strip_suffix(".slice") {
        Some(s) => &s[s.rfind("-pod")? + 4..],
        None => c.strip_prefix("pod")?,
    };
    let uid = rest.replace('_', "-");
    let ok = uid.len() >= 8 && uid.chars().all(|ch| ch.is_ascii_hexdigit() || ch == '-');
    ok.then_some(uid)
}

/// `cri-containerd-<id>.scope`, `crio-<id>.scope`, `docker-<id>.scope`, or
/// a bare 64-hex-digit id (cgroupfs).
fn container_of_component(c: &str) -> Option<String> {
    let id = match c.strip_suffix(".scope") {
        Some(s) => s.rsplit('-').next()?,
        None => c,
    };
    let ok = id.len() >= 12 && id.chars().all(|ch| ch.is_ascii_hexdigit());
    ok.then(|| id.to_string())
}

/// `<namespace>_<pod>_<uid>` of a directory under `pods/`.
pub fn parse_pod_dir(name: &str) -> Option<(String, String, String)> {
    let mut it = name.splitn(3, '_');
    let (ns, pod, uid) = (it.next()?, it.next()?, it.next()?);
    (!ns.is_empty() && !pod.is_empty() && !uid.is_empty()).then(|| (ns.into(), pod.into(), uid.into()))
}

/// `<pod>_<namespace>_<container>-<id>.log` under `containers/`: (container, id).
pub fn parse_container_log(name: &str) -> Option<(String, String)> {
    let rest = name.strip_suffix(".log")?;
    let mut it = rest.splitn(3, '_');
    let (_pod, _ns, tail) = (it.next()?, it.next()?, it.next()?);
    let (container, id) = tail.rsplit_once('-')?;
    (!container.is_empty() && container_of_component(id).is_some()).then(|| (container.into(), id.into()))
}

/// Pod and container names from the kubelet's log directory, re-read when
/// a UID or container ID is not known yet (at most every `REFRESH`, so
/// processes outside pods do not cost a directory walk each).
#[derive(Debug)]
pub struct PodIndex {
    root: PathBuf,
    pods: HashMap<String, (String, String)>,
    /// Container ID -> (container name, pod UID when the pod directory says).
    containers: HashMap<String, String>,
    /// Container names of each pod UID (from `pods/<...>/<container>/`).
    pod_containers: HashMap<String, Vec<String>>,
    read_at: Option<Instant>,
}

const REFRESH: Duration = Duration::from_secs(5);

impl PodIndex {
    pub fn new(root: PathBuf) -> Self {
        Self {
            root,
            pods: HashMap::new(),
            containers: HashMap::new(),
            pod_containers: HashMap::new(),
            read_at: None,
        }
    }

    /// Rebuilds the index from the directories (pods gone from the node
    /// drop out, so the index stays as large as the node's pod list).
    fn read(&mut self) {
        self.read_at = Some(Instant::now());
        self.pods.clear();
        self.containers.clear();
        self.pod_containers.clear();
        for name in crate::topo::dir_names(&self.root.join("pods")) {
            if let Some((ns, pod, uid)) = parse_pod_dir(&name) {
                let dir = self.root.join("pods").join(&name);
                let names = crate::topo::dir_names(&dir);
                self.pod_containers.insert(uid.clone(), names);
                self.pods.insert(uid, (ns, pod));
            }
        }
        for name in crate::topo::dir_names(&self.root.join("containers")) {
            if let Some((container, id)) = parse_container_log(&name) {
                self.containers.insert(id, container);
            }
        }
    }

    fn known(&self, r: &PodRef) -> bool {
        self.pods.contains_key(&r.uid) && r.container_id.as_ref().is_none_or(|c| self.containers.contains_key(c))
    }

    /// The labels of a pod reference (reading the directories again when it
    /// is new and the last read is older than `REFRESH`).
    pub fn labels(&mut self, r: &PodRef) -> PodLabels {
        if !self.known(r) && self.read_at.is_none_or(|t| t.elapsed() >= REFRESH) {
            self.read();
        }
        let (namespace, pod) = self.pods.get(&r.uid).cloned().unwrap_or_default();
        let container = r
            .container_id
            .as_ref()
            .and_then(|c| self.containers.get(c).cloned())
            .or_else(|| match self.pod_containers.get(&r.uid).map(Vec::as_slice) {
                // One container in the pod: it is that one.
                Some([only]) => Some(only.clone()),
                _ => None,
            })
            .unwrap_or_default();
        PodLabels {
            namespace,
            pod,
            container,
        }
    }

    /// The labels of a process (`None`: not in a pod).
    pub fn of_pid(&mut self, pid: u32) -> Option<PodLabels> {
        let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let r = pod_of_cgroup(&text)?;
        Some(self.labels(&r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0f5e5c2a-1b2c-4d5e-8f90-123456789abc";
    const CID: &str = "4a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9";

    #[test]
    fn cgroup_paths_of_both_drivers_and_runtimes() {
        let systemd = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{CID}.scope\n",
            UID.replace('-', "_")
        );
        let want = Some(PodRef {
            uid: UID.into(),
            container_id: Some(CID.into()),
        });
        assert_eq!(pod_of_cgroup(&systemd), want);
        let guaranteed = format!(
            "0::/kubepods.slice/kubepods-pod{}.slice/crio-{CID}.scope",
            UID.replace('-', "_")
        );
        assert_eq!(pod_of_cgroup(&guaranteed), want);
        let cgroupfs_v1 = format!("12:memory:/kubepods/besteffort/pod{UID}/{CID}\n11:cpu:/\n");
        assert_eq!(pod_of_cgroup(&cgroupfs_v1), want);
        let from_a_container = format!(
            "0::/../../kubepods-besteffort-pod{}.slice/docker-{CID}.scope",
            UID.replace('-', "_")
        );
        assert_eq!(pod_of_cgroup(&from_a_container), want);
        let pod_only = format!("0::/kubepods/pod{UID}");
        assert_eq!(
            pod_of_cgroup(&pod_only),
            Some(PodRef {
                uid: UID.into(),
                container_id: None
            })
        );
        for not_a_pod in [
            "0::/",
            "0::/system.slice/containerd.service",
            "0::/user.slice/user-0.slice/session-1.scope",
            "0::/podman/podcast",
            "12:memory:/kubepods/burstable\n",
        ] {
            assert_eq!(pod_of_cgroup(not_a_pod), None, "{not_a_pod}");
        }
    }

    #[test]
    fn kubelet_log_names() {
        assert_eq!(
            parse_pod_dir(&format!("team-a_trainer-7d9f-0_{UID}")),
            Some(("team-a".into(), "trainer-7d9f-0".into(), UID.into()))
        );
        assert_eq!(parse_pod_dir("no-underscores"), None);
        assert_eq!(
            parse_container_log(&format!("trainer-7d9f-0_team-a_nccl-worker-{CID}.log")),
            Some(("nccl-worker".into(), CID.into()))
        );
        assert_eq!(parse_container_log("trainer_team-a_worker.log"), None);
        assert_eq!(parse_container_log(&format!("p_ns_c-{CID}.txt")), None);
    }

    #[test]
    fn index_reads_the_log_directory_and_drops_pods_that_left() {
        let root = std::env::temp_dir().join(format!("gdrtrace-k8s-{}", std::process::id()));
        let pod_dir = root.join("pods").join(format!("team-a_trainer-0_{UID}"));
        fs::create_dir_all(pod_dir.join("worker")).unwrap();
        fs::create_dir_all(pod_dir.join("sidecar")).unwrap();
        fs::create_dir_all(root.join("containers")).unwrap();
        fs::write(
            root.join("containers")
                .join(format!("trainer-0_team-a_worker-{CID}.log")),
            "",
        )
        .unwrap();
        let mut index = PodIndex::new(root.clone());
        let r = PodRef {
            uid: UID.into(),
            container_id: Some(CID.into()),
        };
        let want = PodLabels {
            namespace: "team-a".into(),
            pod: "trainer-0".into(),
            container: "worker".into(),
        };
        assert_eq!(index.labels(&r), want);
        // A container the log directory does not list: two candidates, no guess.
        let other = PodRef {
            uid: UID.into(),
            container_id: Some("ab".repeat(32)),
        };
        assert_eq!(index.labels(&other).container, "");
        fs::remove_dir_all(&root).unwrap();
        index.read();
        assert_eq!(
            index.labels(&r),
            PodLabels::default(),
            "a pod gone from the node is forgotten"
        );
    }
}
