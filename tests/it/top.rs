//! `gdrtrace top` in a real terminal: tmux runs it in a pane of a private
//! server (`tmux -L`), and the test reads the pane as a user sees it
//! (`capture-pane`). What is proven:
//! - attached to a running `gdrtrace drive pin-churn`, captures of the pane
//!   show the process row with its registrations per second, and the figure
//!   changes between two captures (the view refreshes in place);
//! - `q` restores the terminal: the pane is off the alternate screen, the
//!   shell's earlier output and its next line are back, the view is gone;
//! - recorded torch jobs (the 2x H200 fixtures: two emulated nodes under
//!   `run`, and a job attached after its set-up) replayed into `top
//!   --replay` show each rank's GPU verdict and basis as `replay` judges
//!   them, and the detail pane shows the verdict's cause;
//! - at 80 columns the replayed job's table shows whole headers (columns
//!   that do not fit are left out, never cut to "VERDIC") with each rank's
//!   verdict, and `?` lists the keys and the columns left out;
//! - without a terminal `top` says so in one line, suggests `attach
//!   --interval`, and exits 2.
//!
//! Where tmux is missing the terminal tests say `skipping:` (the suite's
//! set-up installs it: `scripts/setup.sh --vm`); the live one also needs
//! BPF (`can_trace`).
use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use integration_tests::{can_trace, fixture, gdrtrace_path, have, run, stderr, stdout};

/// A tmux server of its own, one window running `sh`, killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(name: &str) -> Tmux {
        Tmux::sized(name, 200, 50)
    }

    fn sized(name: &str, columns: u16, lines: u16) -> Tmux {
        let socket = format!("gdrtrace-top-{name}-{}", std::process::id());
        let t = Tmux { socket };
        let ok = t
            .cmd()
            .args([
                "new-session",
                "-d",
                "-s",
                "main",
                "-x",
                &columns.to_string(),
                "-y",
                &lines.to_string(),
                // The server's environment, not this command's, reaches the
                // pane: the prompt is set where the shell starts.
                "env PS1='$ ' sh",
            ])
            .env("TERM", "xterm-256color")
            .status()
            .expect("spawning tmux");
        assert!(ok.success(), "tmux new-session failed");
        // Keys typed before the shell reads are echoed by the terminal and
        // then run after the prompt: wait for the prompt first.
        t.wait(Duration::from_secs(30), "the shell's prompt", |c| {
            c.lines().any(|l| l.trim_end() == "$")
        });
        t
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket]);
        c
    }

    /// Types `keys` into the pane (tmux key names: `Enter`, `Down`, `q`).
    fn keys(&self, keys: &[&str]) {
        let ok = self
            .cmd()
            .args(["send-keys", "-t", "main"])
            .args(keys)
            .status()
            .expect("tmux send-keys");
        assert!(ok.success());
    }

    /// Types a shell line and Enter.
    fn line(&self, text: &str) {
        self.keys(&["-l", text]);
        self.keys(&["Enter"]);
    }

    fn capture(&self) -> String {
        let o = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "main"])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn alternate_on(&self) -> bool {
        let o = self
            .cmd()
            .args(["display-message", "-p", "-t", "main", "#{alternate_on}"])
            .output()
            .expect("tmux display-message");
        String::from_utf8_lossy(&o.stdout).trim() == "1"
    }

    /// The first settled capture for which `ok` holds, within `limit`: one
    /// the next capture, 150 ms later, repeats (on a loaded host a capture
    /// can land in the middle of a redraw).
    fn wait(&self, limit: Duration, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let until = Instant::now() + limit;
        loop {
            let c = self.capture();
            if ok(&c) {
                std::thread::sleep(Duration::from_millis(150));
                if self.capture() == c || Instant::now() >= until {
                    return c;
                }
                continue;
            }
            assert!(
                Instant::now() < until,
                "waited {limit:?} for {what}; the pane shows:\n{c}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
    }
}

/// The value under `column` (the table's header names it) in the row of `pid`.
fn cell(screen: &str, pid: u32, column: &str) -> Option<String> {
    let header = screen.lines().find(|l| l.contains(" PID ") && l.contains(column))?;
    let start = header.find(column)?;
    let row = screen.lines().find(|l| {
        l.get(..8)
            .is_some_and(|p| p.trim_start_matches('>').trim() == pid.to_string())
    })?;
    let rest: String = row.chars().skip(start).collect();
    Some(rest.split_whitespace().next().unwrap_or("").to_string())
}

/// Whether the shell printed `top-exited-N` (the line typed holds `top-exited-$?`).
fn exited(screen: &str) -> bool {
    screen.lines().any(|l| output(l).starts_with("top-exited-"))
}

/// A pane line without a shell prompt before it: output can follow a
/// prompt on one line when a command was typed ahead of it.
fn output(line: &str) -> &str {
    line.strip_prefix("$ ").unwrap_or(line)
}

fn rate(v: &str) -> f64 {
    if v == "-" { 0.0 } else { v.parse().unwrap_or(-1.0) }
}

/// A workload killed when the test ends.
struct Workload(Child);

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn live_view_of_pin_churn_refreshes_and_q_restores_the_terminal() {
    let test = "live_view_of_pin_churn_refreshes_and_q_restores_the_terminal";
    if !have(test, "tmux", "scripts/setup.sh --vm installs it") || !can_trace(test) {
        return;
    }
    let bin = gdrtrace_path();
    // Registrations until it is killed: a billion cycles outlast the test.
    let churn = Workload(
        Command::new(&bin)
            .args(["drive", "pin-churn", "--iterations", "1000000000", "--odirect-mib", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting pin-churn"),
    );
    let pid = churn.0.id();
    let t = Tmux::start("live");
    let marker = "before-top-7f3a";
    t.line(&format!("echo {marker}"));
    t.wait(Duration::from_secs(30), "the shell", |c| {
        c.lines().any(|l| output(l) == marker)
    });
    let dir = integration_tests::scratch("top-live");
    let json = dir.join("top.json");
    t.line(&format!(
        "{} top --pid {pid} --interval 500ms --json {}; echo top-exited-$?",
        bin.display(),
        json.display()
    ));
    let reg = |c: &str| cell(c, pid, "REG/s").map(|v| rate(&v));
    let first = t.wait(Duration::from_secs(60), "the pin-churn row with registrations/s", |c| {
        reg(c).is_some_and(|r| r > 0.0)
    });
    assert!(t.alternate_on(), "the view is on the alternate screen");
    assert!(
        !first.contains(marker),
        "the shell's lines are hidden while the view is up:\n{first}"
    );
    assert!(
        cell(&first, pid, "COMM").is_some_and(|c| c == "gdrtrace"),
        "the row names the process:\n{first}"
    );
    let before = cell(&first, pid, "REG/s").expect("the figure");
    let second = t.wait(Duration::from_secs(20), "registrations/s to change", |c| {
        cell(c, pid, "REG/s").is_some_and(|v| v != before && rate(&v) > 0.0)
    });
    println!(
        "registrations/s: {before} then {}",
        cell(&second, pid, "REG/s").unwrap_or_default()
    );
    t.keys(&["q"]);
    let after = t.wait(Duration::from_secs(30), "top to exit", exited);
    assert!(
        after.lines().any(|l| output(l) == "top-exited-0"),
        "top exits 0 on q:\n{after}"
    );
    assert!(!t.alternate_on(), "q leaves the alternate screen");
    assert!(
        after.lines().any(|l| output(l) == marker),
        "the earlier output is back:\n{after}"
    );
    assert!(!after.contains("REG/s"), "the view is gone:\n{after}");
    assert!(
        after.contains("gdrtrace top: traced"),
        "the one-line summary follows on stderr:\n{after}"
    );
    // The report at exit, as attach's: the process with its registrations.
    let report = integration_tests::read_report(&json);
    assert_eq!(report.schema, "gdrtrace.report/v1");
    let row = report
        .processes
        .iter()
        .find(|p| p.pid == pid)
        .unwrap_or_else(|| panic!("pid {pid} in the report: {:?}", report.processes));
    assert!(row.registrations > 0, "{row:?}");
    // A prompt is back after the echo: the shell reads lines again.
    t.line("echo shell-is-back");
    t.wait(Duration::from_secs(30), "the shell", |c| {
        c.lines().any(|l| output(l) == "shell-is-back")
    });
    drop(churn);
}

/// The verdict and basis per rank that `replay` gives the recording.
fn verdicts(recording: &str) -> Vec<(u32, String, String)> {
    let o = run(&["replay", recording, "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r = integration_tests::parse_report("the replayed report", &stdout(&o));
    r.verdicts
        .iter()
        .map(|v| {
            // The names the report gives them, as top shows them.
            let basis = integration_tests::to_json(&v.basis);
            (
                v.pid,
                v.transport.name().to_string(),
                basis.as_str().expect("a name").to_string(),
            )
        })
        .collect()
}

/// Replays `name` into `top`, checks every rank's verdict and basis and
/// the detail pane, and quits with `quit` (a tmux key name).
fn replay_shows_the_verdicts(name: &str, detail: &str, quit: &str) {
    let test = format!("replayed_torch_jobs_show_their_gpu_verdicts ({name})");
    if !have(&test, "tmux", "scripts/setup.sh --vm installs it") {
        return;
    }
    let recording = fixture(&format!("recordings/{name}.rec.gz"));
    let expected = verdicts(&recording);
    assert!(expected.len() >= 2, "{name}: two ranks judged: {expected:?}");
    let t = Tmux::start(name);
    t.line(&format!(
        "{} top --replay {recording} --interval 500ms --speed 20; echo top-exited-$?",
        gdrtrace_path().display()
    ));
    let screen = t.wait(Duration::from_secs(60), "the replay to finish", |c| {
        c.contains("replay finished")
    });
    for (pid, transport, basis) in &expected {
        let verdict = cell(&screen, *pid, "VERDICT");
        assert_eq!(verdict.as_deref(), Some(transport.as_str()), "pid {pid}:\n{screen}");
        assert_eq!(
            cell(&screen, *pid, "BASIS").as_deref(),
            Some(basis.as_str()),
            "pid {pid}:\n{screen}"
        );
    }
    // The first row (the most staged) in the detail pane: its verdict's
    // evidence and cause.
    t.keys(&["Enter"]);
    let pane = t.wait(Duration::from_secs(30), "the detail pane", |c| c.contains("evidence: "));
    assert!(pane.contains(detail), "{name}: the pane shows {detail:?}:\n{pane}");
    t.keys(&[quit]);
    let after = t.wait(Duration::from_secs(30), "top to exit", exited);
    assert!(
        after.lines().any(|l| output(l) == "top-exited-0"),
        "{quit} quits: {after}"
    );
    assert!(!t.alternate_on(), "{quit} leaves the alternate screen");
}

#[test]
fn replayed_torch_jobs_show_their_gpu_verdicts() {
    // Two emulated nodes traced by `run`: NCCL's socket network, judged
    // from the set-up, with the inter-node cause.
    replay_shows_the_verdicts(
        "gpu-h200-nodes-run-default",
        "cause: inter-node traffic over TCP sockets (NET/Socket)",
        "q",
    );
    // A job attached after its set-up: NVLink from the steady state; Ctrl-C
    // quits as q does (raw mode: the key, not SIGINT).
    replay_shows_the_verdicts(
        "gpu-h200-attach-full-auto",
        "NVLink data counters of the GPUs moved",
        "C-c",
    );
}

#[test]
fn without_a_terminal_top_says_so_and_exits_2() {
    for args in [
        vec!["top", "--pid", "1"],
        vec!["top", "--replay", "recordings/gpu-h200-nccl-auto.rec.gz"],
    ] {
        let o = Command::new(gdrtrace_path())
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .expect("spawning gdrtrace");
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(
            err.contains("needs a terminal") && err.contains("attach --interval 1s"),
            "{err}"
        );
        assert!(o.stdout.is_empty());
    }
}

#[test]
fn eighty_columns_show_whole_headers_and_question_mark_helps() {
    let test = "eighty_columns_show_whole_headers_and_question_mark_helps";
    if !have(test, "tmux", "scripts/setup.sh --vm installs it") {
        return;
    }
    let recording = fixture("recordings/gpu-h200-nodes-run-default.rec.gz");
    let expected = verdicts(&recording);
    let t = Tmux::sized("eighty", 80, 24);
    t.line(&format!(
        "{} top --replay {recording} --interval 500ms --speed 20; echo top-exited-$?",
        gdrtrace_path().display()
    ));
    let screen = t.wait(Duration::from_secs(60), "the replay to finish", |c| {
        c.contains("replay finished")
    });
    let header = screen
        .lines()
        .find(|l| l.contains(" PID "))
        .unwrap_or_else(|| panic!("a header:\n{screen}"));
    let words: Vec<&str> = header.split_whitespace().collect();
    for column in ["PID", "COMM", "VERDICT", "STAGED/s", "STAGED%", "HOT"] {
        assert!(words.contains(&column), "{column} whole at 80 columns:\n{screen}");
    }
    let known = [
        "PID", "COMM", "VERDICT", "BASIS", "MOVED/s", "STAGED/s", "STAGED%", "REG/s", "VmPin", "HOT", "OPS", "(p99:",
        "all", "targets)",
    ];
    for w in &words {
        assert!(known.contains(w), "{w:?}: a header cut at 80 columns:\n{screen}");
    }
    assert!(screen.lines().all(|l| l.chars().count() <= 80));
    for (pid, transport, _) in &expected {
        assert_eq!(
            cell(&screen, *pid, "VERDICT").as_deref(),
            Some(transport.as_str()),
            "pid {pid}:\n{screen}"
        );
    }
    assert!(screen.contains("? help"), "the keys line offers help:\n{screen}");
    t.keys(&["?"]);
    let help = t.wait(Duration::from_secs(30), "the help", |c| {
        c.contains("help (? or Esc closes)")
    });
    assert!(
        help.contains("(hidden: too narrow)"),
        "the help names the columns left out:\n{help}"
    );
    t.keys(&["Escape"]);
    t.wait(Duration::from_secs(30), "the table again", |c| c.contains(" PID "));
    t.keys(&["q"]);
    let after = t.wait(Duration::from_secs(30), "top to exit", exited);
    assert!(after.lines().any(|l| output(l) == "top-exited-0"), "{after}");
}
