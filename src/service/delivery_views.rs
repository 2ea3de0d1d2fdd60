//! How outbox rows appear to a viewer, shared by the listing, the run page and the
//! exports: the filter a listing's query names, and the redacted views of an
//! event, an attempt and an audit row.

use app::dto::{AttemptView, AuditEntry, DeliveryQuery, DeliveryView};
use vocab::{DeliveryFilter, DeliveryStatus};

use super::error_class::{self, redact};
use super::{format_ms, parse_instant, ServiceError};
use crate::outbox::model::{AttemptRecord, EventRecord};
use crate::store::ports::{AuditRecord, CauseFilter, DestinationFilter, EventFilter};

/// The `destination` filter's value for events without one.
pub use app::dto::NO_DESTINATION;

/// The filter a query names (without its cursor and page size).
pub fn filter_of(query: &DeliveryQuery) -> Result<EventFilter, ServiceError> {
    let statuses = match non_empty(query.status.clone()) {
        None => Vec::new(),
        Some(value) => DeliveryFilter::parse(&value)
            .ok_or_else(|| {
                ServiceError::invalid(
                    "status",
                    format!(
                        "unknown state {value:?}; expected needs_attention or one of {}",
                        DeliveryStatus::ALL.map(DeliveryStatus::as_str).join(", ")
                    ),
                )
            })?
            .states(),
    };
    let (parent_type, parent_id) = match non_empty(query.parent.clone()) {
        None => (None, None),
        Some(value) => match value.split_once(':') {
            Some((t, id)) if !t.is_empty() && !id.is_empty() => {
                (Some(t.to_string()), Some(id.to_string()))
            }
            _ => {
                return Err(ServiceError::invalid(
                    "parent",
                    "must be <parent type>:<parent id>, e.g. run:0193…",
                ))
            }
        },
    };
    Ok(EventFilter {
        kind: non_empty(query.kind.clone()),
        statuses,
        source: non_empty(query.source.clone()),
        parent_type,
        parent_id,
        created_from_ms: non_empty(query.created_from.clone())
            .map(|v| parse_instant("created_from", &v, false))
            .transpose()?,
        created_to_ms: non_empty(query.created_to.clone())
            .map(|v| parse_instant("created_to", &v, true))
            .transpose()?,
        before: None,
        limit: 0,
        destination: non_empty(query.destination.clone()).map(|origin| {
            if origin == NO_DESTINATION {
                DestinationFilter::None
            } else {
                DestinationFilter::Origin(origin)
            }
        }),
        cause: non_empty(query.cause.clone())
            .map(|label| cause_filter(&label))
            .transpose()?,
    })
}

/// The events whose last error is of the class `label` names, as the failure
/// groups name it; an unknown label is refused naming `cause`.
fn cause_filter(label: &str) -> Result<CauseFilter, ServiceError> {
    let cause = error_class::cause_named(label).ok_or_else(|| {
        ServiceError::invalid(
            "cause",
            format!("{label:?} is not a cause Herald names; take one from the failure groups"),
        )
    })?;
    Ok(CauseFilter {
        rules: error_class::cause_prefixes(),
        cause,
    })
}

pub(crate) fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.trim().is_empty())
}

/// What a payload says about where it goes, reduced to what every reader may see:
/// the channel and the destination's origin (never its path, query or secret reference).
fn destination(payload: &str) -> (Option<String>, Option<String>) {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(payload) else {
        return (None, None);
    };
    let origin = value
        .get("url")
        .and_then(|u| u.as_str())
        .and_then(crate::routes::origin);
    let channel = value
        .get("channel")
        .and_then(|c| c.as_str())
        .map(str::to_string)
        .or_else(|| origin.as_ref().map(|_| "webhook".to_string()));
    (channel, origin)
}

/// An audit row as the Audit page and its export show it.
pub fn audit_entry(record: AuditRecord) -> AuditEntry {
    AuditEntry {
        id: record.id,
        event_id: record.event_id,
        action: record.action,
        actor: record.actor,
        from_status: record.from_status,
        acknowledged_duplicate_risk: record.acknowledged_duplicate_risk,
        affected: record.affected,
        at: format_ms(record.at_ms),
        reason: record.reason,
    }
}

/// An event as a viewer may see it: never the payload; the error's text only with
/// `data:read` (its class otherwise).
pub fn view(event: &EventRecord, sees_data: bool) -> DeliveryView {
    let (channel, destination) = destination(&event.payload);
    DeliveryView {
        event_id: event.event_id.clone(),
        kind: event.kind.clone(),
        source: event.source.clone(),
        parent_type: event.parent_type.clone(),
        parent_id: event.parent_id.clone(),
        channel,
        destination,
        status: event.status,
        attempts: event.attempts,
        cycle: event.cycle,
        cycle_attempts: event.cycle_attempts,
        max_attempts: event.max_attempts,
        last_status_code: event.last_status_code,
        last_error: redact(event.last_error.as_deref(), sees_data),
        // A parked event (behind its lane's head) has no time of its own.
        next_attempt_at: (event.status == DeliveryStatus::Pending
            && event.next_attempt_at != crate::store::events::LANE_PARKED_AT)
            .then(|| format_ms(event.next_attempt_at)),
        created_at: format_ms(event.created_at),
        updated_at: format_ms(event.updated_at),
        completed_at: event.completed_at.map(format_ms),
        failed_at: event.failed_at.map(format_ms),
        uncertain_at: event.uncertain_at.map(format_ms),
        dead_letter_id: event.dead_letter_id.clone(),
    }
}

pub fn attempt_view(attempt: &AttemptRecord, sees_data: bool) -> AttemptView {
    AttemptView {
        attempt: attempt.attempt,
        cycle: attempt.cycle,
        started_at: format_ms(attempt.started_at),
        duration_ms: (attempt.finished_at - attempt.started_at).max(0),
        outcome: attempt.outcome.clone(),
        status_code: attempt.status_code,
        error: redact(attempt.error.as_deref(), sees_data),
    }
}

/// Up to `limit` rows of the stores' pages, newest first across them, each
/// store's rows in the order its database gave them; with the store each came
/// from.
pub fn merge_newest_first<T>(
    pages: Vec<Vec<T>>,
    created_at: impl Fn(&T) -> i64,
    limit: usize,
) -> Vec<(usize, T)> {
    let mut pages: Vec<std::collections::VecDeque<T>> = pages.into_iter().map(Into::into).collect();
    let mut merged = Vec::with_capacity(limit);
    while merged.len() < limit {
        // The newest head; on a tie, the first store's (a stable merge).
        let newest = (0..pages.len())
            .filter_map(|i| pages[i].front().map(|row| (i, created_at(row))))
            .fold(None, |best: Option<(usize, i64)>, (i, at)| match best {
                Some((_, best_at)) if best_at >= at => best,
                _ => Some((i, at)),
            });
        let Some((store, _)) = newest else { break };
        if let Some(row) = pages[store].pop_front() {
            merged.push((store, row));
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_show_only_channel_and_origin() {
        let webhook = r#"{"url":"https://hooks.example.com:8443/secret/path?token=abc","body":{},"secret_ref":"env:SECRET"}"#;
        assert_eq!(
            destination(webhook),
            (
                Some("webhook".into()),
                Some("https://hooks.example.com:8443".into())
            )
        );
        let chat = r#"{"channel":"chat","url":"https://chat.example.com/robot?key=k","text":"hi"}"#;
        assert_eq!(
            destination(chat),
            (Some("chat".into()), Some("https://chat.example.com".into()))
        );
        assert_eq!(destination(r#"{"record":"x"}"#), (None, None));
        assert_eq!(destination("not json"), (None, None));
    }

    #[test]
    fn a_group_filter_names_a_destination_or_none_and_a_known_cause() {
        let query = |destination: &str, cause: &str| DeliveryQuery {
            destination: Some(destination.into()),
            cause: Some(cause.into()),
            ..DeliveryQuery::default()
        };
        let filter = filter_of(&query("https://a", "the receiver timed out")).unwrap();
        assert_eq!(
            filter.destination,
            Some(DestinationFilter::Origin("https://a".into()))
        );
        assert!(filter.cause.is_some());
        let filter = filter_of(&query(NO_DESTINATION, "no error recorded")).unwrap();
        assert_eq!(filter.destination, Some(DestinationFilter::None));
        let refused = filter_of(&query("https://a", "gremlins"))
            .unwrap_err()
            .to_string();
        assert!(
            refused.starts_with("cause: \"gremlins\" is not a cause"),
            "{refused}"
        );
    }

    /// Ties of one millisecond keep each store's own order (a database may
    /// order ids by a collation that ignores case), and across stores the
    /// newer row comes first.
    #[test]
    fn stores_merge_newest_first_keeping_each_stores_order() {
        let jobs = vec![(5, "b"), (5, "A"), (3, "c")];
        let approvals = vec![(5, "z"), (4, "y")];
        let merged = merge_newest_first(vec![jobs, approvals], |(at, _)| *at, 10);
        let order: Vec<(usize, &str)> = merged.iter().map(|(s, (_, id))| (*s, *id)).collect();
        assert_eq!(order, [(0, "b"), (0, "A"), (1, "z"), (1, "y"), (0, "c")]);
        let first = merge_newest_first(
            vec![vec![(5, "b"), (5, "A")], vec![(6, "z")]],
            |(at, _)| *at,
            2,
        );
        let order: Vec<&str> = first.iter().map(|(_, (_, id))| *id).collect();
        assert_eq!(order, ["z", "b"], "at most the limit, newest first");
    }
}
