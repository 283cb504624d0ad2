//! Transfer records: counts and a sample per (op, verdict), and the
//! `--transfers` stream they are written to.
use std::collections::BTreeMap;

use super::OpKey;
use crate::classify::transfer::{self, Transfer};

/// Transfer records per (op, verdict).
#[derive(Debug, Default)]
pub struct Transfers {
    pub groups: BTreeMap<OpKey, TransferGroup>,
    /// The `--transfers` stream (a write error moves it to a fallback
    /// file: `output::StreamFile`); `sink_error` holds a serialization error.
    pub sink: Option<std::io::BufWriter<crate::output::StreamFile>>,
    pub sink_error: Option<std::io::Error>,
}

#[derive(Clone, Debug, Default)]
pub struct TransferGroup {
    pub count: u64,
    pub bytes: u64,
    pub sample: Vec<Transfer>,
}

impl Transfers {
    pub fn add(&mut self, t: Transfer) {
        if let Some(out) = &mut self.sink
            && self.sink_error.is_none()
        {
            use std::io::Write as _;
            let r = serde_json::to_writer(&mut *out, &t)
                .map_err(std::io::Error::from)
                .and_then(|()| out.write_all(b"\n"));
            if let Err(e) = r {
                self.sink_error = Some(e);
            }
        }
        let g = self.groups.entry(OpKey::new(&t.op, t.transport)).or_default();
        g.count += t.calls.unwrap_or(1);
        g.bytes += t.bytes;
        if g.sample.len() < transfer::SAMPLE_PER_GROUP {
            g.sample.push(t);
        }
    }

    /// Flushes and closes the `--transfers` file; the error says where
    /// the records went when it failed.
    pub fn finish(&mut self) -> crate::error::Result<()> {
        let serialized = match self.sink_error.take() {
            Some(e) => Err(crate::error::Error::io("serializing the transfer records", e)),
            None => Ok(()),
        };
        let closed = match self.sink.take() {
            // A StreamFile takes every byte: the flush cannot fail.
            Some(out) => match out.into_inner() {
                Ok(s) => s.finish(),
                Err(e) => e.into_inner().into_parts().0.finish(),
            },
            None => Ok(()),
        };
        closed.and(serialized)
    }
}
