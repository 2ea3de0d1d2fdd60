//! What a node's configuration keeps it from doing, as `/readyz` and the console
//! say it: a setting and the problem, never a secret's value.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigNotice {
    /// The setting to fix, e.g. `callback_secret_ref`.
    pub setting: String,
    /// What goes wrong until it is fixed.
    pub problem: String,
}
