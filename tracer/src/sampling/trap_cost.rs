//! What a trapped call costs its caller (`calibrate.rs` measures it); the
//! estimator corrects rates by it (docs/sampling.md#trap-cost).

/// What a trapped call costs the caller, as `calibrate.rs` measures it:
/// entry-only, and entry plus return, on a function whose first
/// instruction the kernel emulates; and an entry-only trap on one it
/// single-steps.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct TrapCost {
    pub entry_ns: f64,
    pub pair_ns: f64,
    pub stepped_ns: f64,
}

/// What a trapped call costs its caller, in microseconds (`calibrate.rs`).
#[derive(Clone, Debug, Default)]
pub(super) struct Cost {
    pub(super) entry: f64,
    pub(super) pair: f64,
    /// What a single-stepped first instruction adds to an entry.
    pub(super) step: f64,
}
