//! What long commands are doing, on standard error (`validate`, `baseline
//! record`: each workload traced is a step). Where standard error is a
//! terminal, one live line at the bottom says what is running and for how
//! long (steps inside steps joined: `baseline record 41.2 s > validate:
//! nccl-auto 3.1 s`), redrawn four times a second and kept clear of every
//! other line printed (`output::set_status`); otherwise, in a log or a
//! pipe, one line when a step starts and one when it ends, with its time.
//! Either way the end of each step stays as a line.
use std::{
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

/// The steps running, outermost first: (id, name, started).
static ACTIVE: Mutex<Vec<(u64, String, Instant)>> = Mutex::new(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(0);

/// How often the live line is redrawn.
const TICK: Duration = Duration::from_millis(250);

/// Whether standard error is a terminal (the live line) or not (lines).
fn live() -> bool {
    // SAFETY: isatty has no preconditions.
    unsafe { libc::isatty(2) == 1 }
}

fn secs(since: Instant) -> String {
    format!("{:.1} s", since.elapsed().as_secs_f64())
}

/// The live line: every running step with its time so far.
fn line(active: &[(u64, String, Instant)]) -> String {
    active
        .iter()
        .map(|(_, name, at)| format!("{name} {}", secs(*at)))
        .collect::<Vec<_>>()
        .join(" > ")
}

/// Redraws the live line while any step runs.
fn ticker() {
    loop {
        {
            let Ok(active) = ACTIVE.lock() else { return };
            if active.is_empty() {
                return;
            }
            crate::output::set_status(Some(format!("{} (running)", line(&active))));
        }
        std::thread::sleep(TICK);
    }
}

/// A step of a long command, from `start` until `end` (or drop).
#[must_use = "a step ends when it is dropped"]
pub struct Step {
    id: u64,
    name: String,
    started: Instant,
    ended: bool,
}

impl Step {
    /// Says that `name` started (a line, or the live line).
    pub fn start(name: impl Into<String>) -> Step {
        let name = name.into();
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        if live() {
            let first = ACTIVE.lock().map(|mut a| {
                a.push((id, name.clone(), started));
                a.len() == 1
            });
            if first.unwrap_or(false) {
                let _ = std::thread::Builder::new().name("progress".into()).spawn(ticker);
            }
        } else {
            errln!("{name}: started");
        }
        Step {
            id,
            name,
            started,
            ended: false,
        }
    }

    /// Says how the step ended (`done`, `failed: ...`) and after how long.
    pub fn end(mut self, outcome: &str) {
        self.finish(outcome);
    }

    fn finish(&mut self, outcome: &str) {
        if self.ended {
            return;
        }
        self.ended = true;
        if let Ok(mut active) = ACTIVE.lock() {
            if let Some(i) = active.iter().position(|(id, ..)| *id == self.id) {
                active.remove(i);
            }
            // Cleared under the lock: the ticker cannot draw this step again.
            if live() {
                crate::output::set_status(None);
            }
        }
        errln!("{}: {outcome} after {}", self.name, secs(self.started));
        if let Ok(active) = ACTIVE.lock()
            && !active.is_empty()
        {
            crate::output::set_status(Some(format!("{} (running)", line(&active))));
        }
    }
}

impl Drop for Step {
    fn drop(&mut self) {
        self.finish("ended");
    }
}

/// Runs `f` as the step `name`: `done` or `failed` at its end.
pub fn step<T, E>(name: impl Into<String>, f: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
    let s = Step::start(name);
    let r = f();
    s.end(if r.is_ok() { "done" } else { "failed" });
    r
}
