//! What a delivery error says to someone without `data:read`.
//!
//! Error texts can carry secret reference names and file paths, resolved internal
//! addresses, record ids and panic messages. Readers and operators see the class of
//! the error — enough to know what went wrong and whether a retry can help — and
//! only `data:read` sees the text itself.

/// Errors' classes: a prefix of the lowercased error text as Herald's channels
/// and handlers word it, and the class it names. The first match wins; several
/// prefixes may name one class. The store sorts failures into these in SQL
/// ([`cause_prefixes`]), so grouping by cause never reads error texts out.
const CLASSES: &[(&str, &str)] = &[
    ("timed out", "the receiver timed out"),
    ("connection failed", "could not connect to the receiver"),
    ("request failed", "the request failed"),
    (
        "receiver answered",
        "the receiver answered with an error status",
    ),
    (
        "destination address",
        "the destination address is not allowed",
    ),
    ("invalid destination url", "the destination URL is invalid"),
    (
        "destination url has no host",
        "the destination URL is invalid",
    ),
    ("signing secret", "the signing secret is unavailable"),
    ("secret reference", "the signing secret is unavailable"),
    (
        "chat delivery stopped",
        "a chat message may have been partly posted",
    ),
    (
        "the lease expired",
        "the outcome is unknown: its lease expired in flight",
    ),
    (
        "the handler crashed",
        "the delivery crashed during the attempt",
    ),
    ("unreadable", "the stored event is unreadable"),
    ("route ", "its route is not configured"),
    ("no handler for kind", "no handler runs this kind"),
    ("target record", "the replay target record is unavailable"),
    (
        "the replay payload",
        "the stored replay instructions are invalid",
    ),
    (
        "the lease was lost",
        "the lease was lost; it will be retried",
    ),
    ("cannot read the approval", "the approval could not be read"),
    // Why an approval prompt was skipped rather than sent: not failures.
    (
        "the step was decided",
        "not sent: the approval was decided first",
    ),
    (
        "the approval was recalled",
        "not sent: the approval was recalled first",
    ),
    ("the approval is ", "not sent: the prompt is no longer owed"),
    ("approval ", "not sent: the approval no longer exists"),
];

/// The class of an error no prefix names.
pub const UNCLASSIFIED: &str = "the delivery failed (the details need data:read)";
/// The cause of an event that failed without an error text.
pub const NO_ERROR: &str = "no error recorded";

/// The class of a delivery error as Herald's channels and handlers word it.
pub fn classify(error: &str) -> &'static str {
    let lower = error.to_ascii_lowercase();
    CLASSES
        .iter()
        .find(|(prefix, _)| lower.starts_with(prefix))
        .map(|(_, class)| *class)
        .unwrap_or(UNCLASSIFIED)
}

/// The prefixes, in order, each with its cause: the index of the first prefix
/// of its class, so the store groups by class. The store's cause of an error is
/// the cause of the first prefix that starts it ([`store::ports::CAUSE_UNCLASSIFIED`]
/// for none, [`store::ports::CAUSE_NO_ERROR`] without an error).
///
/// [`store::ports::CAUSE_UNCLASSIFIED`]: crate::store::ports::CAUSE_UNCLASSIFIED
/// [`store::ports::CAUSE_NO_ERROR`]: crate::store::ports::CAUSE_NO_ERROR
pub fn cause_prefixes() -> Vec<(&'static str, i64)> {
    CLASSES
        .iter()
        .map(|(prefix, class)| (*prefix, class_cause(class)))
        .collect()
}

/// The cause of a class: the index of its first prefix.
fn class_cause(class: &str) -> i64 {
    CLASSES
        .iter()
        .position(|(_, c)| *c == class)
        .map_or(crate::store::ports::CAUSE_UNCLASSIFIED, |i| i as i64)
}

/// The class the store's cause index names.
pub fn cause_label(cause: i64) -> &'static str {
    match cause {
        crate::store::ports::CAUSE_NO_ERROR => NO_ERROR,
        index => usize::try_from(index)
            .ok()
            .and_then(|i| CLASSES.get(i))
            .map_or(UNCLASSIFIED, |(_, class)| *class),
    }
}

/// The cause that names `label`, or `None` for a label no class has.
pub fn cause_named(label: &str) -> Option<i64> {
    if label == UNCLASSIFIED {
        Some(crate::store::ports::CAUSE_UNCLASSIFIED)
    } else if label == NO_ERROR {
        Some(crate::store::ports::CAUSE_NO_ERROR)
    } else {
        CLASSES
            .iter()
            .any(|(_, class)| *class == label)
            .then(|| class_cause(label))
    }
}

/// `error` as `viewer_sees_data` may see it.
pub fn redact(error: Option<&str>, viewer_sees_data: bool) -> Option<String> {
    error.map(|text| {
        if viewer_sees_data {
            text.to_string()
        } else {
            classify(text).to_string()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_paths_and_addresses_become_classes() {
        for (text, class) in [
            (
                "signing secret file:/etc/herald/alerts.secret is unreadable: No such file",
                "the signing secret is unavailable",
            ),
            (
                "destination address 10.1.2.3 is not public; allow-list it",
                "the destination address is not allowed",
            ),
            (
                "target record 0190abc (Account) does not exist",
                "the replay target record is unavailable",
            ),
            (
                "thread panicked at src/secret.rs: password=hunter2",
                "the delivery failed (the details need data:read)",
            ),
        ] {
            let shown = redact(Some(text), false).unwrap();
            assert_eq!(shown, class);
            for secret in ["/etc/herald", "10.1.2.3", "0190abc", "hunter2"] {
                assert!(!shown.contains(secret));
            }
        }
        assert_eq!(
            redact(Some("receiver answered 503 Service Unavailable"), true).as_deref(),
            Some("receiver answered 503 Service Unavailable"),
            "data:read sees the text"
        );
        assert_eq!(
            redact(
                Some("the step was decided (approved) before the prompt was sent"),
                false
            )
            .as_deref(),
            Some("not sent: the approval was decided first"),
            "a skipped prompt's reason is no failure"
        );
        assert_eq!(redact(None, false), None);
    }

    #[test]
    fn causes_name_classes_and_back() {
        use crate::store::ports::{CAUSE_NO_ERROR, CAUSE_UNCLASSIFIED};
        let prefixes = cause_prefixes();
        let cause_of = |prefix: &str| prefixes.iter().find(|(p, _)| *p == prefix).unwrap().1;
        let receiver = cause_of("receiver answered");
        assert_eq!(cause_label(receiver), classify("receiver answered 400"));
        assert_eq!(cause_named(cause_label(receiver)), Some(receiver));
        // Two prefixes, one class: one cause, so the store groups them together.
        let invalid = cause_of("invalid destination url");
        assert_eq!(cause_of("destination url has no host"), invalid);
        assert_eq!(cause_named("the destination URL is invalid"), Some(invalid));
        assert_eq!(cause_label(CAUSE_UNCLASSIFIED), UNCLASSIFIED);
        assert_eq!(cause_named(UNCLASSIFIED), Some(CAUSE_UNCLASSIFIED));
        assert_eq!(cause_label(CAUSE_NO_ERROR), NO_ERROR);
        assert_eq!(cause_named(NO_ERROR), Some(CAUSE_NO_ERROR));
        assert_eq!(cause_named("made up"), None);
        assert!(prefixes.iter().all(|(p, _)| *p == p.to_ascii_lowercase()));
    }
}
