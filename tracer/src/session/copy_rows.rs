//! The copy rows' reclaim: which rows the kernel tagged before the last
//! look are final ([`CopyTags`]), and when the table may be renewed.
use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use tracer_common::{AggKey, copy_row_tag, copy_tag_of, copy_tag_older};

use crate::probes::uapi;

/// How long after a look at the copy rows' tags the rows tagged before are
/// final: a call that read an older tag has added to its row long before.
pub(super) const COPY_FINAL_AFTER: Duration = Duration::from_millis(100);

/// The least time between two renewals of the copy-row table: the rows of
/// one are deleted two looks later, each at least [`COPY_FINAL_AFTER`] on.
pub(super) const COPY_RENEW_AFTER: Duration = Duration::from_secs(1);

/// What the reclaim of copy rows keeps from one look to the next
/// ([`Session::reclaim_copy_rows`]).
pub(super) struct CopyTags {
    /// The tag each process's new copy rows had at the last look, and when.
    pub(super) seen: BTreeMap<u32, u16>,
    pub(super) at: Instant,
    /// The table's generation (`control::COPY_GEN`), and when it last
    /// moved on.
    pub(super) generation: u64,
    pub(super) renewed: Option<Instant>,
}

impl CopyTags {
    pub(super) fn new(at: Instant) -> Self {
        Self {
            seen: BTreeMap::new(),
            at,
            generation: 0,
            renewed: None,
        }
    }

    /// The copy rows no call can reach any more: tagged before the tag
    /// their process had at the last look (which moves only forward).
    pub(super) fn done<'a>(&self, copies: impl Iterator<Item = &'a AggKey>) -> Vec<AggKey> {
        copies
            .filter(|k| {
                self.seen
                    .get(&k.tgid)
                    .is_some_and(|now| copy_tag_older(copy_tag_of(k.handle), *now))
            })
            .copied()
            .collect()
    }

    /// A look at each process's region epoch: the tag of its new rows.
    pub(super) fn look(&mut self, epochs: impl IntoIterator<Item = (u32, u64)>, at: Instant) {
        let generation = self.generation;
        self.seen = epochs
            .into_iter()
            .map(|(p, e)| (p, copy_row_tag(e, generation)))
            .collect();
        self.at = at;
    }
}

/// Whether a kernel row is a copy row (`COPY_ROWS`).
pub(super) fn is_copy_row(k: &AggKey) -> bool {
    uapi::row_of(k.op).is_some_and(|(_, r)| r.copy_rows())
}

#[cfg(test)]
mod tests {
    use tracer_common::{AggKey, MAX_ARGS, copy_row_handle, copy_row_tag};

    use super::*;

    fn row(tgid: u32, addr: u64, tag: u16) -> AggKey {
        let op = crate::probes::ops::op_code("cuMemcpyAsync").expect("a copy row");
        let mut args = [0; MAX_ARGS];
        args[0] = addr;
        AggKey {
            tgid,
            op,
            handle: copy_row_handle(op, 0b11, &args, tag),
        }
    }

    /// Rows tagged before the tag their process had at the last look are
    /// done; the current tag's, a later one's, and those of a process not
    /// looked at yet are not; the tags wrap around.
    #[test]
    fn copy_rows_are_done_once_their_tag_is_behind() {
        let mut tags = CopyTags::new(Instant::now());
        let rows = [
            row(1, 0x1000, 4),
            row(1, 0x1000, 5),
            row(1, 0x2000, 6),
            row(2, 0x1000, 0),
        ];
        assert!(tags.done(rows.iter()).is_empty(), "nothing looked at yet");
        tags.look([(1, 5)], Instant::now());
        assert_eq!(tags.done(rows.iter()), vec![rows[0]]);
        // The table renewed: every row of the process falls behind.
        tags.generation = 2;
        tags.look([(1, 5), (2, 0)], Instant::now());
        assert_eq!(tags.done(rows.iter()), rows.to_vec());
        // Around the circle: u16::MAX is behind 1.
        let wrapped = [row(3, 0x1000, u16::MAX), row(3, 0x1000, copy_row_tag(1, 0))];
        tags.generation = 0;
        tags.look([(3, 1)], Instant::now());
        assert_eq!(tags.done(wrapped.iter()), vec![wrapped[0]]);
        // The same copy under two tags is two rows.
        assert_ne!(wrapped[0].handle, wrapped[1].handle);
        assert!(is_copy_row(&wrapped[0]));
    }
}
