//! The console's adapters: the Leptos pages' ports ([`app::port::ConsolePort`],
//! [`app::port::ApprovalsPort`]) served by the services.

mod approvals;
mod runs;

pub use approvals::ApprovalsConsole;
pub use runs::Console;
