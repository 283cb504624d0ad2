//! The event pipeline's first stage: the BPF ring buffer, drained through
//! tokio's `AsyncFd` (woken by the kernel's epoll notification, never by
//! sleep-polling), decoded into `Event` records.

use std::io;

use aya::maps::{MapData, RingBuf};
use tokio::io::{Interest, unix::AsyncFd};
use tracer_common::Event;

/// Decodes one ring-buffer record. Short records (an ABI mismatch) are
/// rejected rather than read past their end.
pub fn decode(bytes: &[u8]) -> Option<Event> {
    if bytes.len() < core::mem::size_of::<Event>() {
        return None;
    }
    // SAFETY: length checked; Event is plain old data; unaligned read.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<Event>()) })
}

/// An async stream of events from the `EVENTS` ring buffer.
pub struct EventStream {
    fd: AsyncFd<RingBuf<MapData>>,
    /// Records too short to decode (never expected; counted, not hidden).
    pub malformed: u64,
}

impl EventStream {
    pub fn new(ring: RingBuf<MapData>) -> io::Result<Self> {
        // SAFETY: the ring buffer owns its map fd for as long as the AsyncFd
        // owns the ring buffer, and the fd never changes.
        let fd = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }.map_err(io::Error::from)?;
        Ok(Self { fd, malformed: 0 })
    }

    /// Waits until records are available, then moves all of them into `out`.
    pub async fn next_batch(&mut self, out: &mut Vec<Event>) -> io::Result<()> {
        let mut guard = self.fd.readable_mut().await?;
        let ring = guard.get_inner_mut();
        while let Some(item) = ring.next() {
            match decode(&item) {
                Some(e) => out.push(e),
                None => self.malformed += 1,
            }
        }
        guard.clear_ready();
        Ok(())
    }

    /// Waits for the kernel's wake-up or the next `beat`, whichever comes
    /// first, and moves the records there are into `out`: records are
    /// submitted without waking the reader below a fill level, so a quiet
    /// buffer is read on the beat.
    pub async fn next_or_beat(&mut self, out: &mut Vec<Event>, beat: &mut tokio::time::Interval) -> io::Result<()> {
        tokio::select! {
            r = self.next_batch(out) => r,
            _ = beat.tick() => {
                self.drain_now(out);
                Ok(())
            }
        }
    }

    /// Moves whatever is in the buffer now into `out`, without waiting.
    pub fn drain_now(&mut self, out: &mut Vec<Event>) {
        let ring = self.fd.get_mut();
        while let Some(item) = ring.next() {
            match decode(&item) {
                Some(e) => out.push(e),
                None => self.malformed += 1,
            }
        }
    }
}
