//! The approvals source (seed 000 and the approvals half of seed 003): records,
//! versioned process definitions, approval instances and what their lifecycle
//! transitions owe — approval prompts, alerts, and the FieldUpdate replay of each
//! lifecycle event, in its record's lane —
//! with the handlers that deliver them. The jobs source (`src/jobs/`) has the
//! same shape; neither imports the other.

pub mod model;
pub mod planner;
pub mod prompts;
pub mod registry;
pub mod replay;
pub mod run_requests;
