//! The jobs source (seed 003): what a run's terminal transition owes, frozen at
//! commit time — a `callback` to the run's callback URL, one `delivery` per named
//! route — and the `dead_letter` notice of a failed event; and the handlers that
//! send them; and the second hop of a run approval (`continuations`): moving a
//! run on once its approval is decided.

pub mod continuations;
mod dead_letter;
pub mod kinds;
mod planner;
mod registry;

pub use planner::{JobsPlan, JobsPlanner};
pub use registry::registry;
