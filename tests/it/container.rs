//! The node agent under a real container runtime: Debian's podman with
//! runc, a root filesystem unpacked from Debian packages
//! (scripts/container-rootfs.sh: the packages of the release binary's
//! libraries, `apt-get download` + `dpkg -x`, no image registry), run with
//! what deploy/kubernetes/daemonset.yaml gives the pod, read from that file:
//! its capabilities (drop ALL, add BPF, PERFMON, SYS_PTRACE,
//! DAC_READ_SEARCH), read-only root, the host PID namespace, its hostPath
//! mounts (tracefs, cgroup, bpffs, /var/log/pods) and its arguments.
//!
//! What is proven:
//! - the containerised agent discovers a `gdrtrace drive pin-churn` started
//!   on the host after it, by the kernel's open of libibverbs, attaches that
//!   process's libibverbs through `/proc/PID/root`, and a scrape of
//!   `/metrics` from the host returns exactly the registrations the workload
//!   counted itself;
//! - without CAP_BPF it exits non-zero with one clear line;
//! - the seccomp profile decides: the DaemonSet's `RuntimeDefault` works
//!   where the runtime's default profile lets CAP_BPF call bpf() and
//!   CAP_PERFMON perf_event_open() (containerd's rules, applied here to
//!   podman's own profile as a stand-in for containerd's, which Debian's
//!   podman does not ship); podman's (and CRI-O's, containers/common) own
//!   default profile allows them only with CAP_SYS_ADMIN, and the agent then
//!   exits with one line saying BPF is not permitted although the
//!   capabilities are effective, naming the seccomp filter (the measured
//!   reason for components/seccomp-unconfined).
//!
//! Measured and printed, not asserted (it depends on the kernel): per-point
//! uprobes (kernels without uprobe_multi) under the same capabilities, which
//! Linux commit ba677dbe77af (2025) limits to CAP_SYS_ADMIN.
//!
//! Differences from a pod, each named: the network is the host's (podman
//! `--network host`, so the test scrapes 127.0.0.1; the pod's network is
//! not part of its security context), `--labels=process` replaces the
//! DaemonSet's `--labels=pod` (the host workload is in no pod; per-process
//! series let the test match its pid), and the ulimits are set explicitly
//! (podman's defaults exceed this host's hard limits).
use std::{
    collections::BTreeMap,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use integration_tests::{
    can_trace, field, gdrtrace_path, have, http_get,
    k8s::{self, DaemonSet},
    repo_root,
};
use serde_json::Value;

const HOW: &str = "bash scripts/setup.sh --vm installs it";

/// The release binary scripts/test.sh builds before the tests.
pub(crate) fn release_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    // target/debug/deps/container-HASH -> target/release/gdrtrace
    let target = exe.parent()?.parent()?.parent()?;
    let bin = target.join("release/gdrtrace");
    bin.is_file().then_some(bin)
}

/// What the DaemonSet gives the agent's container.
struct PodSpec {
    args: Vec<String>,
    cap_add: Vec<String>,
    cap_drop: Vec<String>,
    read_only: bool,
    seccomp: String,
    /// (host path, container path).
    mounts: Vec<(String, String)>,
}

fn pod_spec() -> PodSpec {
    let ds: DaemonSet = k8s::read(&repo_root().join("deploy/kubernetes/daemonset.yaml"));
    let spec = &ds.spec.template.spec;
    assert_eq!(
        spec.host_pid,
        Some(true),
        "the DaemonSet runs in the host PID namespace"
    );
    let c = spec.container();
    let sc = &c.security_context;
    let host: BTreeMap<&str, &str> = spec
        .volumes
        .iter()
        .filter_map(|v| Some((v.name.as_str(), v.host_path.as_ref()?.path.as_str())))
        .collect();
    let mounts = c
        .volume_mounts
        .iter()
        .map(|m| {
            let name = m.name.as_str();
            assert_eq!(m.read_only, Some(true), "{name} is mounted read-only");
            let from = host
                .get(name)
                .unwrap_or_else(|| panic!("{name} is not a hostPath volume"));
            (from.to_string(), m.mount_path.clone())
        })
        .collect();
    PodSpec {
        args: c.args.clone(),
        cap_add: sc.capabilities.add.clone(),
        cap_drop: sc.capabilities.drop.clone(),
        read_only: sc.read_only_root_filesystem == Some(true),
        seccomp: sc.seccomp_profile.kind.clone(),
        mounts,
    }
}

/// A seccomp profile (containers/common's seccomp.json): the fields the
/// test edits, and every other kept as it came.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct SeccompProfile {
    default_errno_ret: Option<u32>,
    syscalls: Vec<SeccompRule>,
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct SeccompRule {
    names: Vec<String>,
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

/// containerd's default seccomp rules for the two calls the agent needs
/// (contrib/seccomp/seccomp_default.go: `bpf` allowed with CAP_BPF,
/// `perf_event_open` with CAP_PERFMON, both with CAP_SYS_ADMIN) applied to
/// podman's default profile: a stand-in for containerd's RuntimeDefault,
/// which is generated in containerd's code and not shipped as a file.
fn containerd_like_profile(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string("/usr/share/containers/seccomp.json").expect("podman's default seccomp profile");
    let mut p: SeccompProfile = integration_tests::parse_as("podman's seccomp.json", &text);
    // containerd's default action is EPERM (podman's ENOSYS).
    p.default_errno_ret = Some(1);
    let gated = ["bpf", "perf_event_open"];
    for rule in &mut p.syscalls {
        rule.names.retain(|n| !gated.contains(&n.as_str()));
    }
    p.syscalls.retain(|r| !r.names.is_empty());
    for (call, cap) in [
        ("bpf", "CAP_BPF"),
        ("bpf", "CAP_SYS_ADMIN"),
        ("perf_event_open", "CAP_PERFMON"),
        ("perf_event_open", "CAP_SYS_ADMIN"),
    ] {
        let rest = serde_json::json!({
            "action": "SCMP_ACT_ALLOW", "args": [],
            "includes": {"caps": [cap]}, "excludes": {}
        });
        p.syscalls.push(SeccompRule {
            names: vec![call.to_string()],
            rest: serde_json::from_value(rest).expect("an object"),
        });
    }
    let out = dir.join("seccomp-containerd-like.json");
    std::fs::write(&out, serde_json::to_string_pretty(&p).expect("JSON")).expect("writing the profile");
    out
}

/// How a container is run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Seccomp<'a> {
    /// The profile the DaemonSet asks for, as containerd has it.
    RuntimeDefault(&'a Path),
    /// podman's own default profile (containers/common, CRI-O's too).
    Podman,
}

fn podman(name: &str, rootfs: &Path, spec: &PodSpec, caps: &[String], seccomp: Seccomp<'_>) -> Command {
    let mut c = Command::new("podman");
    c.args(["--runtime", "runc", "--cgroup-manager", "cgroupfs", "run", "--rm"])
        .args(["--name", name])
        .args(["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"])
        .args(["--pid=host", "--network=host", "--env", "NODE_NAME=container-test"]);
    if spec.read_only {
        c.arg("--read-only");
    }
    for d in &spec.cap_drop {
        c.args(["--cap-drop", d]);
    }
    if !caps.is_empty() {
        c.args(["--cap-add", &caps.join(",")]);
    }
    match seccomp {
        Seccomp::RuntimeDefault(profile) => {
            c.arg("--security-opt").arg(format!("seccomp={}", profile.display()));
        }
        Seccomp::Podman => {}
    }
    for (from, to) in &spec.mounts {
        c.args(["-v", &format!("{from}:{to}:ro")]);
    }
    // Flags end here: podman takes the first word after --rootfs DIR as the
    // command.
    c.arg("--rootfs").arg(rootfs).arg("/usr/local/bin/gdrtrace");
    c
}

/// The agent's arguments from the DaemonSet, listening on `addr`.
fn agent_args(spec: &PodSpec, addr: &str) -> Vec<String> {
    spec.args
        .iter()
        .map(|a| {
            if a.starts_with("--listen=") {
                format!("--listen={addr}")
            } else if a.starts_with("--labels=") {
                "--labels=process".to_string()
            } else {
                a.clone()
            }
        })
        .collect()
}

/// A container that is removed when dropped.
struct Container {
    name: String,
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl Container {
    fn start(mut cmd: Command, name: &str) -> Container {
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning podman");
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let pipe = child.stderr.take().expect("piped stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut s = sink.lock().expect("stderr sink poisoned");
                s.push_str(&line);
                s.push('\n');
            }
        });
        Container {
            name: name.to_string(),
            child,
            stderr,
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr sink poisoned").clone()
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(["rm", "-f", "-t", "2", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A run of the agent that must fail: its status and stderr.
fn must_fail(mut cmd: Command, what: &str) -> String {
    let (out, killed) = integration_tests::run_bounded(&mut cmd, Duration::from_secs(120));
    assert!(!killed, "{what}: the container did not exit");
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert!(!out.status.success(), "{what}: the agent started:\n{err}");
    err
}

fn sum(exposition: &str, name: &str, with: &[(&str, &str)]) -> Option<f64> {
    let mut found = None;
    for line in exposition.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else { continue };
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue;
        }
        if !with.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\""))) {
            continue;
        }
        let v: f64 = rest.rsplit(' ').next()?.parse().ok()?;
        found = Some(found.unwrap_or(0.0) + v);
    }
    found
}

fn ensure_tracefs() {
    if !Path::new("/sys/kernel/tracing/events").is_dir() {
        let _ = Command::new("mount")
            .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
            .status();
    }
}

#[test]
fn the_daemonset_runs_under_podman_and_counts_a_host_workload() {
    let test = "the_daemonset_runs_under_podman_and_counts_a_host_workload";
    if !can_trace(test) || !have(test, "podman", HOW) || !have(test, "runc", HOW) || !have(test, "python3", HOW) {
        return;
    }
    let Some(bin) = release_binary() else {
        assert!(
            !integration_tests::trace_required(),
            "{test}: target/release/gdrtrace is not built (scripts/test.sh builds it before the tests)"
        );
        println!("skipping: {test}: target/release/gdrtrace is not built (cargo build --release -p tracer)");
        return;
    };
    ensure_tracefs();
    let spec = pod_spec();
    assert_eq!(spec.seccomp, "RuntimeDefault", "the DaemonSet's seccomp profile");
    assert!(
        spec.read_only && spec.cap_drop == ["ALL"],
        "read-only root, every capability dropped"
    );
    for (from, _) in &spec.mounts {
        std::fs::create_dir_all(from).unwrap_or_else(|e| panic!("creating {from}: {e}"));
    }

    // The image: Debian packages and the release binary, under target/.
    let dir = bin.parent().and_then(Path::parent).expect("target/").join("container");
    let built = Command::new("bash")
        .arg(repo_root().join("scripts/container-rootfs.sh"))
        .arg(&dir)
        .arg(&bin)
        .output()
        .expect("running scripts/container-rootfs.sh");
    assert!(
        built.status.success(),
        "building the root filesystem: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    println!("{}", String::from_utf8_lossy(&built.stdout).trim());
    let rootfs = dir.join("rootfs");
    let profile = containerd_like_profile(&dir);

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let name = format!("gdrtrace-test-{}", std::process::id());
    let mut cmd = podman(&name, &rootfs, &spec, &spec.cap_add, Seccomp::RuntimeDefault(&profile));
    cmd.args(agent_args(&spec, &addr));
    let mut agent = Container::start(cmd, &name);
    let start = Instant::now();
    while http_get(&addr, "/readyz", None).map(|r| r.0) != Ok(200) {
        if let Ok(Some(status)) = agent.child.try_wait() {
            panic!("the containerised agent exited ({status}):\n{}", agent.stderr());
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the containerised agent did not become ready:\n{}",
            agent.stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(http_get(&addr, "/healthz", None).map(|r| r.0), Ok(200));

    // A host workload started after the agent.
    let out = Command::new(gdrtrace_path())
        .args([
            "drive",
            "pin-churn",
            "--iterations",
            "300",
            "--buffers",
            "2",
            "--pages",
            "4",
        ])
        .args(["--odirect-mib", "0"])
        .output()
        .expect("running drive pin-churn");
    let summary = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{summary}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = summary
        .lines()
        .find(|l| l.starts_with("pin-churn: pid="))
        .expect("the workload's summary");
    let (pid, regs, unregs) = (
        field(line, "pid").to_string(),
        field(line, "registrations"),
        field(line, "unregistrations"),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let metrics = loop {
        let (status, _, body) = http_get(&addr, "/metrics", None).expect("scraping the agent");
        assert_eq!(status, 200, "{body}");
        if sum(&body, "gdrtrace_registrations_total", &[("pid", &pid)]) == Some(regs as f64) {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "the agent in the container did not count {regs} registrations of pid {pid}:\n{body}\n{}",
            agent.stderr()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(
        sum(
            &metrics,
            "gdrtrace_deregistrations_total",
            &[("pid", &pid), ("backing", "io_uring")]
        ),
        Some(unregs as f64)
    );
    assert!(
        sum(
            &metrics,
            "gdrtrace_process_info",
            &[("pid", &pid), ("discovered_by", "libibverbs")]
        )
        .is_some(),
        "found by the kernel's open of libibverbs:\n{metrics}"
    );
    assert!(
        sum(&metrics, "gdrtrace_library_files_attached", &[]).unwrap_or(0.0) >= 1.0,
        "the host process's libibverbs attached through /proc/PID/root:\n{metrics}"
    );
    assert_eq!(sum(&metrics, "gdrtrace_events_lost_total", &[]), Some(0.0), "{metrics}");
    println!(
        "containerised agent: pid {pid} registrations {regs} (counted exactly), nvml_available {:?}",
        sum(&metrics, "gdrtrace_nvml_available", &[])
    );
    drop(agent);

    // Without CAP_BPF: one line, non-zero.
    let without: Vec<String> = spec.cap_add.iter().filter(|c| *c != "BPF").cloned().collect();
    let mut cmd = podman(
        &format!("{name}-nobpf"),
        &rootfs,
        &spec,
        &without,
        Seccomp::RuntimeDefault(&profile),
    );
    cmd.args(agent_args(&spec, &addr));
    let err = must_fail(cmd, "without CAP_BPF");
    println!("without CAP_BPF: {err}");
    assert_eq!(err.lines().count(), 1, "one line:\n{err}");
    assert!(
        err.starts_with("gdrtrace: ") && err.contains("run as root or with CAP_BPF") && !err.contains("panicked"),
        "{err}"
    );

    // podman's (and CRI-O's) own default profile: bpf() only with CAP_SYS_ADMIN.
    let mut cmd = podman(
        &format!("{name}-podman-seccomp"),
        &rootfs,
        &spec,
        &spec.cap_add,
        Seccomp::Podman,
    );
    cmd.args(agent_args(&spec, &addr));
    let err = must_fail(cmd, "under podman's default seccomp profile");
    println!("podman's default seccomp profile: {err}");
    assert_eq!(err.lines().count(), 1, "one line:\n{err}");
    assert!(
        err.contains("not permitted to use BPF") && err.contains("seccomp"),
        "{err}"
    );

    // Per-point uprobes with the same capabilities (what a kernel without
    // uprobe_multi would use), and with CAP_SYS_ADMIN added.
    for (what, extra) in [
        ("the DaemonSet's capabilities", None),
        ("with SYS_ADMIN", Some("SYS_ADMIN")),
    ] {
        let mut caps = spec.cap_add.clone();
        caps.extend(extra.map(str::to_string));
        let mut cmd = podman(
            &format!("{name}-perpoint"),
            &rootfs,
            &spec,
            &caps,
            Seccomp::RuntimeDefault(&profile),
        );
        cmd.args(["bench", "detach", "--points", "3", "--per-point"]);
        let (out, _) = integration_tests::run_bounded(&mut cmd, Duration::from_secs(120));
        let text = String::from_utf8_lossy(&out.stderr).trim().to_string();
        println!(
            "measured: per-point uprobes, {what}: {}",
            text.lines().last().unwrap_or("")
        );
    }
}
