//! The approvals source (seed 000 and the approvals half of seed 003): records,
//! versioned process definitions, approval instances and what their lifecycle
//! transitions owe — approval prompts, alerts, and the Recall FieldUpdate replay —
//! with the handlers that deliver them. The jobs source lives in
//! `notifications.rs`; this family has the same shape.

pub mod model;
pub mod planner;
pub mod prompts;
pub mod replay;
