//! `peak-rss CMD ARGS...`: runs a command, then prints its exit status and
//! its peak resident memory (`wait4(2)`'s `ru_maxrss`), as `/usr/bin/time -v`
//! would (not installed everywhere) on stderr: `peak-rss: status N maxrss
//! BYTES`. A process takes the high-water mark of the memory it was
//! started from for its own when it execs, so a test process, large with
//! its fixtures and other tests, starts this small one to measure a command.
use std::{os::unix::process::ExitStatusExt as _, process::Command};

fn main() {
    let mut args = std::env::args_os().skip(1);
    let Some(cmd) = args.next() else {
        eprintln!("usage: peak-rss CMD [ARGS...]");
        std::process::exit(2);
    };
    let child = match Command::new(&cmd).args(args).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("peak-rss: {}: {e}", cmd.to_string_lossy());
            std::process::exit(127);
        }
    };
    let Ok(pid) = libc::pid_t::try_from(child.id()) else {
        eprintln!("peak-rss: pid {} out of range", child.id());
        std::process::exit(1);
    };
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our child, not yet waited for; both pointers are valid.
    if unsafe { libc::wait4(pid, &mut status, 0, &mut usage) } != pid {
        eprintln!("peak-rss: wait4: {}", std::io::Error::last_os_error());
        std::process::exit(1);
    }
    let status = std::process::ExitStatus::from_raw(status);
    eprintln!(
        "peak-rss: status {} maxrss {}",
        status
            .code()
            .map_or_else(|| format!("signal {}", status.signal().unwrap_or(0)), |c| c.to_string()),
        usage.ru_maxrss * 1024
    );
    std::process::exit(status.code().unwrap_or(1));
}
