//! `gdrtrace drive syscalls`: `getppid(2)` in a loop on one or more threads,
//! the event source of the pipeline benchmark (`gdrtrace bench pipeline`
//! attaches a tracepoint to it). It moves no data; it exists to find how
//! many events per second the tracer's pipeline delivers without loss.
use std::time::Instant;

use serde::Serialize;

#[derive(Clone, Debug, clap::Args)]
pub struct SyscallsOpts {
    /// getppid calls in all (split over the threads).
    #[arg(long, default_value_t = 1_000_000)]
    pub calls: u64,
    /// Threads making them.
    #[arg(long, default_value_t = 1)]
    pub threads: u32,
    /// Calls per second in all (0: as fast as the threads go).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Also write the summary as JSON to this file.
    #[arg(long)]
    pub summary: Option<std::path::PathBuf>,
}

#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct SyscallsSummary {
    pub pid: u32,
    pub calls: u64,
    pub threads: u32,
    pub elapsed_s: f64,
}

impl SyscallsSummary {
    pub fn line(&self) -> String {
        format!(
            "syscalls: pid={} calls={} threads={} elapsed {:.3} s ({:.0} calls/s)",
            self.pid,
            self.calls,
            self.threads,
            self.elapsed_s,
            self.calls as f64 / self.elapsed_s.max(1e-9)
        )
    }
}

pub fn run(o: &SyscallsOpts) -> SyscallsSummary {
    let threads = crate::clamp::at_least("--threads", o.threads, 1, |n| n.to_string(), "the fewest threads");
    let per = o.calls / threads as u64;
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            // The first thread takes the remainder, so the total is exact.
            let n = per + if t == 0 { o.calls % threads as u64 } else { 0 };
            let per_s = o.rate as f64 / threads as f64;
            s.spawn(move || {
                let start = Instant::now();
                for i in 0..n {
                    // Paced: every 256 calls, wait until the schedule has caught up.
                    if per_s > 0.0 && i % 256 == 0 {
                        let due = std::time::Duration::from_secs_f64(i as f64 / per_s);
                        while start.elapsed() < due {
                            std::hint::spin_loop();
                        }
                    }
                    // SAFETY: getppid has no preconditions.
                    std::hint::black_box(unsafe { libc::getppid() });
                }
            });
        }
    });
    SyscallsSummary {
        pid: std::process::id(),
        calls: o.calls,
        threads,
        elapsed_s: started.elapsed().as_secs_f64(),
    }
}
