//! What can be probed (the catalog), how library symbols are found, and the
//! planner that attaches each point by the best strategy this kernel allows.
pub mod catalog;
pub mod coverage;
pub mod insn;
pub mod kinds;
pub mod libs;
pub mod ops;
pub mod planner;
pub mod symbols;
pub mod uapi;
pub mod uprobes;

pub use catalog::{CATALOG, Family, ProbePoint, Strategy, Target};
pub use planner::{Coverage, Planner, Status};
