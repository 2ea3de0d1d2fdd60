//! Find by id (the console's search box): what a pasted id, or a part of one of
//! at least [`MIN_SEARCH_LEN`] characters, names, and which page shows it.
//! The reads are `DeliveryReads::find_ids` on every store
//! (`DeliveryService::find_by_id`); this module checks the text and shapes the
//! answer.

use std::collections::HashMap;

use app::dto::search::{Found, SearchAnswer, MAX_SEARCH_LEN, MIN_SEARCH_LEN, SEARCH_LIMIT};
use vocab::{Permission, Viewer};

use super::ServiceError;
use crate::store::engine::ID_PART_INDEXED;
use crate::store::ports::{IdKind, IdMatch};

// Every part the box takes is long enough for the stores' indexes on ids.
const _: () = assert!(MIN_SEARCH_LEN >= ID_PART_INDEXED);

/// The searched text, trimmed, or why it cannot be searched.
pub fn check_query(q: &str) -> Result<String, ServiceError> {
    let q = q.trim();
    if q.chars().count() < MIN_SEARCH_LEN {
        return Err(ServiceError::invalid(
            "q",
            format!(
                "needs at least {MIN_SEARCH_LEN} characters of an id (shorter parts match too much)"
            ),
        ));
    }
    if q.len() > MAX_SEARCH_LEN {
        return Err(ServiceError::invalid(
            "q",
            format!("is longer than any id ({MAX_SEARCH_LEN} characters at most)"),
        ));
    }
    if q.chars().any(char::is_whitespace) {
        return Err(ServiceError::invalid("q", "holds a space; ids have none"));
    }
    Ok(q.to_string())
}

/// The answer from every store's matches (up to [`SEARCH_LIMIT`] + 1 of each
/// kind from each, the one over saying there are more): each id once, exact ones
/// first, then by kind and id, at most [`SEARCH_LIMIT`] parts of each kind;
/// approvals and records only for viewers who may read them.
pub fn answer(
    query: String,
    mut matches: Vec<IdMatch>,
    unavailable: Vec<String>,
    viewer: &Viewer,
) -> SearchAnswer {
    let sees_records = viewer.can(Permission::RecordsRead);
    matches.retain(|m| sees_records || matches!(m.kind, IdKind::Run | IdKind::Event));
    // Stores sharing one database answer the same rows.
    matches.sort_by(|a, b| (!a.exact, a.kind, &a.id).cmp(&(!b.exact, b.kind, &b.id)));
    matches.dedup_by(|a, b| a.kind == b.kind && a.id == b.id);
    let mut parts_of_kind: HashMap<IdKind, u32> = HashMap::new();
    let mut more = false;
    matches.retain(|m| {
        if m.exact {
            return true;
        }
        let listed = parts_of_kind.entry(m.kind).or_default();
        *listed += 1;
        more |= *listed > SEARCH_LIMIT;
        *listed <= SEARCH_LIMIT
    });
    SearchAnswer {
        query,
        found: matches.into_iter().map(found).collect(),
        more,
        unavailable,
    }
}

fn found(m: IdMatch) -> Found {
    let (context, opens) = match m.kind {
        IdKind::Run => (
            format!("a run of type {}", m.owner_id),
            Some(format!("/runs/{}", m.id)),
        ),
        IdKind::Event => {
            let opens = match m.owner_type.as_str() {
                "run" => Some(format!("/runs/{}", m.owner_id)),
                "approval" => Some(format!("/approvals?id={}", m.owner_id)),
                _ => None,
            };
            (format!("owed by {} {}", m.owner_type, m.owner_id), opens)
        }
        IdKind::Approval => (
            format!("of {} {}", m.owner_type, m.owner_id),
            Some(format!("/approvals?id={}", m.id)),
        ),
        IdKind::Record => (
            format!("a record of {}", m.owner_type),
            Some(app::dto::record_page(&m.owner_type, &m.id)),
        ),
    };
    Found {
        kind: m.kind,
        id: m.id,
        exact: m.exact,
        context,
        opens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vocab::Role;

    fn m(kind: IdKind, id: &str, exact: bool) -> IdMatch {
        IdMatch {
            kind,
            id: id.into(),
            exact,
            owner_type: "run".into(),
            owner_id: "r1".into(),
        }
    }

    #[test]
    fn short_spaced_or_overlong_text_is_refused_with_the_reason() {
        assert!(check_query("  0193abcd  ").is_ok());
        for bad in ["0193abc", "0193 abcd", &"a".repeat(201)] {
            let err = check_query(bad).unwrap_err();
            assert!(
                matches!(err, ServiceError::Invalid { field: "q", .. }),
                "{bad}: {err:?}"
            );
        }
    }

    #[test]
    fn exact_matches_come_first_once_and_readers_see_what_they_may() {
        let viewer = Viewer {
            name: "r".into(),
            role: Role::Reader,
        };
        let matches = vec![
            m(IdKind::Event, "callback_x", false),
            m(IdKind::Run, "x", true),
            m(IdKind::Run, "x", true),
            m(IdKind::Record, "rec", false),
        ];
        let answer = answer("x".into(), matches, vec![], &viewer);
        let ids: Vec<&str> = answer.found.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(ids, ["x", "callback_x", "rec"]);
        assert!(!answer.more);
        assert_eq!(answer.only(), Some("/runs/x"));
        assert_eq!(answer.found[1].opens.as_deref(), Some("/runs/r1"));
    }

    #[test]
    fn parts_past_the_limit_are_left_out_and_said_so() {
        let viewer = Viewer {
            name: "r".into(),
            role: Role::Reader,
        };
        let runs: Vec<IdMatch> = (0..=SEARCH_LIMIT)
            .map(|i| m(IdKind::Run, &format!("x{i:02}"), false))
            .collect();
        let listed = answer("x".into(), runs.clone(), vec![], &viewer);
        assert_eq!(listed.found.len(), SEARCH_LIMIT as usize);
        assert!(listed.more);
        let fit = answer("x".into(), runs[1..].to_vec(), vec![], &viewer);
        assert!(!fit.more);
    }
}
