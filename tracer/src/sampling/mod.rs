//! Sampling of the busy rows (collectives, group and UCX data calls, CUDA
//! copies): when their probes are on ([`controller`]), and what their calls
//! were while off ([`estimator`]). The model, its words and the measurement
//! behind each rule: docs/sampling.md.
pub mod controller;
pub mod estimator;
mod exact;
mod mode;
mod rates;
mod trap_cost;

pub use controller::{BEAT, DutyCycle, Switch};
pub use estimator::{Cpu, Estimator, RowKey};
pub use exact::{EXACT_SHARE, ExactRates, ExactTraps};
pub use mode::{DEFAULT_BUDGET_HZ, MIN_FIXED_ON, Mode};
pub use trap_cost::TrapCost;
