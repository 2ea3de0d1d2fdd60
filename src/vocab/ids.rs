//! What an id names: the four kinds of row an operator may paste an id of (the
//! store finds them, the console lists them).

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum IdKind {
    Run,
    Event,
    Approval,
    Record,
}

impl IdKind {
    /// How the console names it.
    pub fn label(self) -> &'static str {
        match self {
            IdKind::Run => "Run",
            IdKind::Event => "Delivery",
            IdKind::Approval => "Approval",
            IdKind::Record => "Record",
        }
    }
}
