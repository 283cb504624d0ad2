//! What `vm-test` is doing, on stderr: a line when each kernel's VM starts
//! and one when it ends, with its time (the guest adds a line per check as
//! it starts and ends). Where stderr is a terminal, a live line at the
//! bottom also says which VM is running and for how long; the VM's console
//! output, echoed as it comes (`vm::pump`), is written around it
//! (`beside_status`), so it never lands inside the line.
use std::{
    io::Write,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

/// The live line, while one is shown, and whether the last byte echoed
/// ended a line (the live line is drawn only at the start of a line).
static STATUS: Mutex<(Option<String>, bool)> = Mutex::new((None, true));

fn clear(err: &mut impl Write) {
    let _ = err.write_all(b"\r\x1b[K");
}

/// Writes `bytes` to `sink` with the live line (if any) cleared first and
/// drawn again after when `bytes` end a line.
pub fn beside_status(sink: &mut dyn Write, bytes: &[u8]) {
    let Ok(mut status) = STATUS.lock() else {
        let _ = sink.write_all(bytes);
        return;
    };
    let shown = status.0.clone();
    if shown.is_some() && status.1 {
        clear(&mut std::io::stderr());
    }
    let _ = sink.write_all(bytes);
    let _ = sink.flush();
    if let Some(&last) = bytes.last() {
        status.1 = last == b'\n';
    }
    if let Some(line) = shown.filter(|_| status.1) {
        let mut err = std::io::stderr();
        let _ = err.write_all(line.as_bytes());
        let _ = err.flush();
    }
}

/// The live line of one running step; cleared when dropped.
pub struct Live {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

/// Shows `name: running for N s` at the bottom of stderr while the
/// returned value lives (nothing where stderr is not a terminal).
pub fn live(name: String, started: Instant) -> Option<Live> {
    // SAFETY: isatty has no preconditions.
    if unsafe { libc::isatty(2) } != 1 {
        return None;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let handle = std::thread::spawn(move || {
        while !s.load(Ordering::Relaxed) {
            if let Ok(mut status) = STATUS.lock() {
                let line = format!("{name}: running for {:.0} s", started.elapsed().as_secs_f64());
                if status.1 {
                    let mut err = std::io::stderr();
                    clear(&mut err);
                    let _ = err.write_all(line.as_bytes());
                    let _ = err.flush();
                }
                status.0 = Some(line);
            }
            for _ in 0..10 {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        if let Ok(mut status) = STATUS.lock()
            && status.0.take().is_some()
            && status.1
        {
            clear(&mut std::io::stderr());
        }
    });
    Some(Live {
        stop,
        handle: Some(handle),
    })
}

impl Drop for Live {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// `eprintln!` around the live line (for what `vm-run` says while a VM runs).
macro_rules! eprintln_beside {
    ($($t:tt)*) => {
        $crate::progress::beside_status(&mut std::io::stderr(), format!("{}\n", format_args!($($t)*)).as_bytes())
    };
}
pub(crate) use eprintln_beside;
