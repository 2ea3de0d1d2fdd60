//! Find by id: what the header's search box opens.

use serde::{Deserialize, Serialize};
use vocab::IdKind;

/// The shortest part of an id the search takes (shorter parts match too much).
pub const MIN_SEARCH_LEN: usize = 8;
/// The longest text the search takes.
pub const MAX_SEARCH_LEN: usize = 200;
/// Matches listed at most (of each kind, per store).
pub const SEARCH_LIMIT: u32 = 10;

/// One id the search found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Found {
    pub kind: IdKind,
    pub id: String,
    /// Whether it is the searched text itself (not a part of it).
    pub exact: bool,
    /// What it belongs to, in words ("run 0193…", "object Invoice").
    pub context: String,
    /// The console page that shows it; `None` where none does yet.
    pub opens: Option<String>,
}

/// The search's answer: exact matches first; none found is an empty list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchAnswer {
    pub query: String,
    pub found: Vec<Found>,
    /// More parts of ids matched than are listed (of some kind, in some store):
    /// more of the id narrows it.
    #[serde(default)]
    pub more: bool,
    /// Stores that could not be searched (their matches are missing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable: Vec<String>,
}

impl SearchAnswer {
    /// The one page to open straight away: a single exact match, or a single match.
    pub fn only(&self) -> Option<&str> {
        let exact: Vec<&Found> = self.found.iter().filter(|f| f.exact).collect();
        let one = match (exact.as_slice(), self.found.as_slice()) {
            ([one], _) => *one,
            ([], [one]) => one,
            _ => return None,
        };
        one.opens.as_deref()
    }
}
