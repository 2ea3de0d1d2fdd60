//! Failures grouped by cause (issue 23, item 3): the deliveries that need
//! attention, one group a kind, source, destination and class of last error, so
//! a thousand failures from one dead endpoint are one line beside the one that
//! matters. The store counts them in SQL; this names each cause and merges the
//! groups of every store.

use std::collections::HashMap;

use app::dto::{FailureGroup, FailureGroups};

use super::error_class::cause_label;
use super::format_ms;
use crate::store::ports;

/// The most groups a page lists.
pub const FAILURE_GROUPS: u32 = 50;

/// A group's kind, source, destination and class.
type GroupKey = (String, String, Option<String>, &'static str);

/// How many a group holds and when they came to need attention.
struct Seen {
    count: i64,
    first_ms: i64,
    last_ms: i64,
}

/// Every store's groups as one list: a group found in several stores is one,
/// largest first, at most [`FAILURE_GROUPS`], and `more` when there were more.
/// Each store gives its groups (distinct in it) up to one over the page, so a
/// store that had more leaves more than a page here too.
pub fn merge(groups: Vec<ports::FailureGroup>, unavailable: Vec<String>) -> FailureGroups {
    let mut merged: HashMap<GroupKey, Seen> = HashMap::new();
    for group in groups {
        let key = (
            group.kind,
            group.source,
            group.destination,
            cause_label(group.cause),
        );
        let seen = merged.entry(key).or_insert(Seen {
            count: 0,
            first_ms: group.first_at_ms,
            last_ms: group.last_at_ms,
        });
        seen.count += group.count;
        seen.first_ms = seen.first_ms.min(group.first_at_ms);
        seen.last_ms = seen.last_ms.max(group.last_at_ms);
    }
    let mut list: Vec<_> = merged.into_iter().collect();
    // Largest and latest first; the key keeps equal groups in one order
    // between refreshes.
    list.sort_by(|(a_key, a), (b_key, b)| {
        (b.count, b.last_ms)
            .cmp(&(a.count, a.last_ms))
            .then_with(|| a_key.cmp(b_key))
    });
    let more = list.len() > FAILURE_GROUPS as usize;
    list.truncate(FAILURE_GROUPS as usize);
    FailureGroups {
        groups: list
            .into_iter()
            .map(|((kind, source, destination, cause), seen)| FailureGroup {
                kind,
                source,
                destination,
                cause: cause.to_string(),
                count: seen.count,
                first_seen: format_ms(seen.first_ms),
                last_seen: format_ms(seen.last_ms),
            })
            .collect(),
        more,
        unavailable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::error_class::cause_named;

    fn group(destination: &str, cause: i64, count: i64, at: i64) -> ports::FailureGroup {
        ports::FailureGroup {
            kind: "callback".into(),
            source: "jobs".into(),
            destination: Some(destination.into()),
            cause,
            count,
            first_at_ms: at,
            last_at_ms: at + 10,
        }
    }

    #[test]
    fn causes_of_one_class_and_stores_merge_largest_first() {
        let invalid = cause_named("the destination URL is invalid").unwrap();
        let receiver = cause_named("the receiver answered with an error status").unwrap();
        let answer = merge(
            vec![
                // One class from two stores.
                group("https://a", invalid, 2, 100),
                group("https://a", invalid, 3, 50),
                group("https://b", receiver, 4, 10),
                group("https://a", receiver, 1, 70),
            ],
            Vec::new(),
        );
        let shown: Vec<(&str, &str, i64, &str, &str)> = answer
            .groups
            .iter()
            .map(|g| {
                (
                    g.destination.as_deref().unwrap(),
                    g.cause.as_str(),
                    g.count,
                    g.first_seen.as_str(),
                    g.last_seen.as_str(),
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                (
                    "https://a",
                    "the destination URL is invalid",
                    5,
                    "1970-01-01T00:00:00.05Z",
                    "1970-01-01T00:00:00.11Z"
                ),
                (
                    "https://b",
                    "the receiver answered with an error status",
                    4,
                    "1970-01-01T00:00:00.01Z",
                    "1970-01-01T00:00:00.02Z"
                ),
                (
                    "https://a",
                    "the receiver answered with an error status",
                    1,
                    "1970-01-01T00:00:00.07Z",
                    "1970-01-01T00:00:00.08Z"
                ),
            ]
        );
        assert!(!answer.more);
        let many: Vec<_> = (0..FAILURE_GROUPS as i64 + 1)
            .map(|i| group(&format!("https://h{i}"), receiver, 1, i))
            .collect();
        let answer = merge(many, Vec::new());
        assert_eq!(answer.groups.len(), FAILURE_GROUPS as usize);
        assert!(answer.more);
    }
}
