//! The run every fault scenario shares (the scenarios themselves, one file each, live in
//! [`crate::scenarios`]):
//!
//! 1. start two instances, `a` and `b` (a plan may reroute `b`, e.g. through a fault proxy);
//! 2. create a fresh sale with the plan's strategy;
//! 3. start the load (half the client tasks on each instance) and let it warm up;
//! 4. let the plan inject its faults, always on `b` or on a shared server, in rounds: at least
//!    `fault_rounds`, more (up to `max_fault_rounds`) while the effect it expects is not seen yet;
//! 5. heal everything, let the load settle (or, for the control, drain the sale to sold out);
//! 6. stop the load, resolve unknown operations through `a`, check against PostgreSQL;
//! 7. judge: the safety checks (or, for the control, that a violation was detected), liveness
//!    checks, and the plan's own expectations.
//!
//! # Layout
//!
//! | file | what lives there |
//! |---|---|
//! | `plan.rs` | [`FaultPlan`], what a scenario implements, with its defaults; [`TARGET`], [`FENCED`] |
//! | `fault_run.rs` | [`FaultRun`], what a plan works with while it injects (faults, outages, rounds, probes); [`Probe`] |
//! | `execute.rs` | [`run`]: steps 1 to 7 above, and the report |
//! | `judge.rs` | [`RunOutcome`], the checks every fault scenario shares, recovery after each fault |
//! | `history_file.rs` | the history written as JSON lines next to the report |

mod execute;
mod fault_run;
mod history_file;
mod judge;
mod plan;

pub use execute::{drain, run, scenario_name};
pub use fault_run::{FaultRun, Probe};
pub use history_file::write_history;
pub(crate) use judge::placed;
pub use judge::{RunOutcome, recovery, shared_checks};
pub use plan::{FENCED, FaultPlan, TARGET};
