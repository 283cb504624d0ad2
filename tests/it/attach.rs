//! `gdrtrace attach`: running processes are traced without being touched;
//! children forked and images exec'd after attach are followed in the
//! kernel; SIGINT, SIGTERM and SIGKILL of the tracer leave the target running
//! and the kernel clean.
use std::{
    io::{BufRead as _, BufReader},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use integration_tests::{can_trace, compile, gdrtrace_path, links_and_probe_events, our_programs, read_report};

/// The tests here count this object's programs loaded in the kernel, so no
/// other tracer may run beside them.
fn serial() -> std::sync::RwLockWriteGuard<'static, ()> {
    integration_tests::exclusive_bpf()
}

fn wait_programs(n: usize) -> usize {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let c = our_programs();
        if c == n || Instant::now() > until {
            return c;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts `gdrtrace attach ARGS` and waits until it says its probes are live.
fn attach(args: &[&str]) -> Child {
    let mut child = Command::new(gdrtrace_path())
        .arg("attach")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning gdrtrace attach");
    let mut err = BufReader::new(child.stderr.take().expect("piped stderr"));
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            err.read_line(&mut line).expect("reading the tracer's stderr") > 0,
            "gdrtrace attach exited before attaching"
        );
        if line.contains("attached to") {
            break;
        }
    }
    // Keep draining stderr so the tracer never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    child
}

fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks existence.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}

#[test]
fn attach_by_pid_follows_fork_and_exec() {
    let _serial = serial();
    if !can_trace("attach_by_pid_follows_fork_and_exec") {
        return;
    }
    let dir = integration_tests::scratch("attach");
    let go = dir.join("go");
    let json = dir.join("report.json");
    let bin = gdrtrace_path();
    let script = format!(
        "while [ ! -e {go} ]; do sleep 0.05; done; {bin} drive pin-churn --iterations 40 --odirect-mib 0 >/dev/null; exec {bin} drive pin-churn --iterations 25 --odirect-mib 0 >/dev/null",
        go = go.display(),
        bin = bin.display()
    );
    let mut target = Command::new("sh").arg("-c").arg(&script).spawn().unwrap();
    let pid = target.id().to_string();
    let tracer = attach(&["--pid", &pid, "--json", json.to_str().unwrap(), "--duration", "60s"]);
    std::fs::write(&go, b"").unwrap();
    assert!(target.wait().unwrap().success());
    // The tracer stops by itself once the last target exited.
    let out = tracer.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = read_report(&json);
    let procs = &r.processes;
    let target_pid = target.id();
    let regs = |p: &gdrtrace::report::Process| p.calls.get("io_uring_register:register-buffers").copied();
    let shell = procs
        .iter()
        .find(|x| x.pid == target_pid)
        .expect("the attached process");
    assert_eq!(regs(shell), Some(25), "exec'd image traced under the same pid");
    let child = procs
        .iter()
        .find(|x| x.parent == Some(target_pid) && regs(x) == Some(40))
        .unwrap_or_else(|| panic!("forked child not followed: {procs:?}"));
    assert!(child.pid != target_pid);
    let latency = integration_tests::attach_section(&r).latency_ms;
    assert!(latency > 0.0, "{:?}", r.workloads);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A child started after attach in its own mount namespace, moving data
/// through TCP sockets: it is followed, and its socket bytes are exact.
#[test]
fn attach_follows_child_in_other_mount_namespace_with_socket_traffic() {
    let _serial = serial();
    if !can_trace("attach_follows_child_in_other_mount_namespace_with_socket_traffic") {
        return;
    }
    let dir = integration_tests::scratch("attach-ns");
    let sock_pair = dir.join("sock_pair");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/standin/sock_pair.c");
    compile(&["-O2", "-pthread", "-o", sock_pair.to_str().unwrap(), src]);
    let go = dir.join("go");
    let ns = dir.join("ns");
    let json = dir.join("report.json");
    const MIB: u64 = 24;
    let script = format!(
        "while [ ! -e {go} ]; do sleep 0.05; done; unshare --mount --propagation private sh -c 'readlink /proc/self/ns/mnt > {ns}; exec {bin} {go} {MIB}'",
        go = go.display(),
        ns = ns.display(),
        bin = sock_pair.display()
    );
    let mut target = Command::new("sh").arg("-c").arg(&script).spawn().unwrap();
    let pid = target.id().to_string();
    let tracer = attach(&["--pid", &pid, "--json", json.to_str().unwrap(), "--duration", "60s"]);
    std::fs::write(&go, b"").unwrap();
    assert!(target.wait().unwrap().success(), "the socket workload failed");
    let out = tracer.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ours = std::fs::read_link("/proc/self/ns/mnt").unwrap();
    let theirs = std::fs::read_to_string(&ns).unwrap();
    assert_ne!(
        theirs.trim(),
        ours.to_str().unwrap(),
        "the child must run in another mount namespace"
    );
    let r = read_report(&json);
    let procs = &r.processes;
    let worker = procs
        .iter()
        .find(|p| p.comm == "sock_pair")
        .unwrap_or_else(|| panic!("the namespaced child was not followed: {procs:?}"));
    assert_eq!(
        worker.parent.map(|p| p.to_string()),
        Some(pid.to_string()),
        "followed as the target's child"
    );
    assert_eq!(worker.socket.bytes_sent, MIB << 20, "send(2) bytes");
    assert_eq!(worker.socket.bytes_received, MIB << 20, "recv(2) bytes");
    assert_eq!(worker.socket.sockets, 2, "one sending and one receiving socket");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn attach_by_cgroup() {
    let _serial = serial();
    if !can_trace("attach_by_cgroup") {
        return;
    }
    let root = std::path::Path::new("/sys/fs/cgroup");
    if !root.join("cgroup.procs").is_file() {
        println!("skipping: attach_by_cgroup: no cgroup v2 hierarchy at /sys/fs/cgroup");
        return;
    }
    let cg = root.join(format!("gdrtrace-test-{}", std::process::id()));
    if std::fs::create_dir(&cg).is_err() {
        println!("skipping: attach_by_cgroup: cannot create a cgroup here");
        return;
    }
    let dir = integration_tests::scratch("cg");
    let go = dir.join("go");
    let json = dir.join("report.json");
    let bin = gdrtrace_path();
    let script = format!(
        "while [ ! -e {go} ]; do sleep 0.05; done; exec {bin} drive pin-churn --iterations 12 --odirect-mib 0 >/dev/null",
        go = go.display(),
        bin = bin.display()
    );
    let mut target = Command::new("sh").arg("-c").arg(&script).spawn().unwrap();
    std::fs::write(cg.join("cgroup.procs"), target.id().to_string()).unwrap();
    let tracer = attach(&[
        "--cgroup",
        cg.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "--duration",
        "60s",
    ]);
    std::fs::write(&go, b"").unwrap();
    assert!(target.wait().unwrap().success());
    let out = tracer.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = read_report(&json);
    let p = r
        .processes
        .iter()
        .find(|x| x.pid == target.id())
        .expect("cgroup member traced");
    assert_eq!(p.calls.get("io_uring_register:register-buffers"), Some(&12));
    let _ = std::fs::remove_dir(&cg);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn signals_leave_target_running_and_kernel_clean() {
    let _serial = serial();
    if !can_trace("signals_leave_target_running_and_kernel_clean") {
        return;
    }
    let mut target = Command::new("sleep").arg("120").spawn().unwrap();
    let pid = target.id();
    let before = wait_programs(our_programs());
    let kernel_before = links_and_probe_events();
    for (sig, name) in [
        (libc::SIGINT, "SIGINT"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGKILL, "SIGKILL"),
    ] {
        let mut tracer = attach(&["--pid", &pid.to_string()]);
        assert!(
            our_programs() > before,
            "{name}: programs should be loaded while attached"
        );
        assert!(
            links_and_probe_events().0 > kernel_before.0,
            "{name}: the tracer's links should exist while attached"
        );
        // SAFETY: signalling our own child.
        unsafe { libc::kill(tracer.id() as i32, sig) };
        let status = tracer.wait().unwrap();
        if sig != libc::SIGKILL {
            assert!(status.success(), "{name}: tracer should exit cleanly, got {status}");
        }
        assert!(alive(pid), "{name}: the target must keep running");
        assert_eq!(wait_programs(before), before, "{name}: BPF programs left behind");
        assert_eq!(
            links_and_probe_events(),
            kernel_before,
            "{name}: (BPF links, tracefs probe entries) left behind"
        );
        assert!(target.try_wait().unwrap().is_none(), "{name}: target exited");
    }
    let _ = target.kill();
    let _ = target.wait();
}
