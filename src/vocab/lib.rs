//! Herald's shared vocabulary: the words the server and the console UI both speak.
//! Roles and the permissions they grant, the signed-in viewer, the run lifecycle and
//! the delivery states with the filters over them, approval definitions and
//! instances (what the approvals store holds) — the types and their rules, with
//! their serialized forms, and nothing else.
//!
//! Shared by the server (`herald`) and the Leptos UI (`app`, which re-exports it from
//! `app::dto`). It depends on serde (and serde_json for JSON values) alone, so it builds for `wasm32-unknown-unknown`.

pub mod approvals;
pub mod deliveries;
pub mod ids;
pub mod roles;
pub mod run_approvals;
pub mod runs;

pub use deliveries::{DeliveryFilter, DeliveryStatus, OTHER_DESTINATIONS};
pub use ids::IdKind;
pub use roles::{Permission, Role, Viewer};
pub use runs::RunStatus;
