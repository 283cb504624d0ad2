//! Closing the sampled rows' links off the tracing loop: `uprobe_multi`
//! links wait out their grace periods when released (docs/perf.md).
use std::time::{Duration, Instant};

/// Closes the links of ended on phases off the tracing loop, each
/// phase's on a thread of its own, at once: closing takes ~45 ms a link
/// behind its grace periods (docs/perf.md), which the loop draining the
/// ring buffer must not wait for, and one phase's close must not wait for
/// the last one's either. A link that waits still traps, uncounted in off
/// phases, and in an on phase it ran its program beside the new link's
/// (the calls are counted once, by the current link: `control::SAMPLE_GEN`).
#[derive(Default)]
pub(super) struct Closer {
    pub(super) running: Vec<std::thread::JoinHandle<Duration>>,
    /// How long each phase's links took to close, from the hand-over.
    pub(super) took: Vec<Duration>,
    /// The most phases' links closing at once.
    pub(super) most: usize,
}

impl Closer {
    pub(super) fn close(&mut self, links: Vec<aya::programs::uprobe::UProbeLink>) {
        if links.is_empty() {
            return;
        }
        self.reap(false);
        let handed = Instant::now();
        let spawned = std::thread::Builder::new()
            .name("gdrtrace-close".into())
            .spawn(move || {
                close_in_parallel(links);
                handed.elapsed()
            });
        match spawned {
            Ok(t) => {
                self.running.push(t);
                self.most = self.most.max(self.running.len());
            }
            // No thread: the links were dropped with it, closed here.
            Err(e) => log::debug!("closing uprobe links on the tracing loop: {e}"),
        }
    }

    /// Joins the closes that are done (every close with `all`).
    pub(super) fn reap(&mut self, all: bool) {
        let (done, running): (Vec<_>, Vec<_>) = std::mem::take(&mut self.running)
            .into_iter()
            .partition(|t| all || t.is_finished());
        self.running = running;
        self.took.extend(done.into_iter().filter_map(|t| t.join().ok()));
    }

    /// Waits for every link handed over to be closed.
    pub(super) fn join(&mut self) {
        self.reap(true);
    }
}

/// Closes links on threads of their own: each `uprobe_multi` link waits
/// out its own grace periods when it is released (~45 ms here), and those
/// waits overlap across threads.
pub(super) fn close_in_parallel(links: Vec<aya::programs::uprobe::UProbeLink>) {
    const THREADS: usize = 16;
    let mut groups: Vec<Vec<_>> = (0..THREADS.min(links.len())).map(|_| Vec::new()).collect();
    let n = groups.len();
    for (i, l) in links.into_iter().enumerate() {
        groups[i % n].push(l);
    }
    std::thread::scope(|s| {
        for g in groups {
            // A thread that cannot start drops its closure, and with it
            // its links, here.
            if let Err(e) = std::thread::Builder::new().spawn_scoped(s, move || drop(g)) {
                log::debug!("closing uprobe links on this thread: {e}");
            }
        }
    });
}
