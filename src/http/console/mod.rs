//! The console's adapters: the Leptos pages' ports ([`app::port::ConsolePort`],
//! [`app::port::ApprovalsPort`], [`app::port::AccountsPort`], [`app::port::RecordsPort`])
//! served by the services.

mod accounts;
mod approvals;
mod records;
mod runs;

pub use accounts::AccountsConsole;
pub use approvals::ApprovalsConsole;
pub use records::RecordsConsole;
pub use runs::Console;
