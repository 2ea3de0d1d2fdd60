//! The console's adapters: the Leptos pages' ports ([`app::port::ConsolePort`],
//! [`app::port::ApprovalsPort`], [`app::port::AccountsPort`]) served by the services.

mod accounts;
mod approvals;
mod runs;

pub use accounts::AccountsConsole;
pub use approvals::ApprovalsConsole;
pub use runs::Console;
