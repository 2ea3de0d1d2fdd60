//! The service layer: every operation the JSON API, the console and the CLI perform,
//! with its permission check. Callers pass the [`Viewer`] they authenticated.

pub mod accounts;
pub mod approvals;
pub mod creations;
pub mod deliveries;
pub mod delivery_views;
pub mod destinations;
pub mod error_class;
pub mod export;
pub mod failures;
pub mod idempotency;
pub mod overview;
pub mod records;
pub mod run_approvals;
pub mod runs;
pub mod search;
pub mod transitions;

use vocab::{Permission, Viewer};

use crate::store::{StoreError, StoreFault};

#[derive(Clone, Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("authentication required: sign in or send an API token")]
    Unauthenticated,
    #[error("forbidden: this needs the {} permission", .0.as_str())]
    Forbidden(Permission),
    #[error("{field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    #[error("forbidden: {0}")]
    Refused(String),
    #[error("{0}")]
    Unavailable(String),
    /// The store lacks a port the operation needs (`memory://` has no durable
    /// outbox): not a fault, and retrying will not help.
    #[error("durable delivery unavailable on this store: {0}")]
    CapabilityUnavailable(String),
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    /// A compare-and-set lost: the delivery is no longer in the state the caller saw.
    #[error("{message}")]
    DeliveryChanged {
        current: vocab::DeliveryStatus,
        message: String,
    },
    #[error("the run is {}; it cannot move to {}", .current.as_str(), .requested.as_str())]
    IllegalTransition {
        current: vocab::RunStatus,
        requested: vocab::RunStatus,
    },
    #[error("{field}: {message}")]
    TooLarge {
        field: &'static str,
        message: String,
    },
    /// An idempotency key sent again with another request (issue 21).
    #[error("Idempotency-Key {key:?} was first sent with another request; a key names one request, so send a new key for this one")]
    KeyReused { key: String },
    #[error("too many failed sign-in attempts; try again later")]
    Throttled,
    #[error("invalid username or password")]
    BadCredentials,
    #[error("internal error")]
    Internal(String),
}

/// One store's part of a page read from several stores (the approvals database
/// apart): its rows, or — when another store can still answer — `None` and a
/// note naming it, so the page shows what it can and says what is missing. With
/// every store down (or one store only) the read fails as a whole. `unavailable`
/// holds the notes so far; `stores` is how many stores the page reads.
pub(crate) fn partial_read<T>(
    store: &str,
    read: Result<T, StoreError>,
    unavailable: &mut Vec<String>,
    stores: usize,
) -> Result<Option<T>, ServiceError> {
    match read.map_err(ServiceError::from) {
        Ok(value) => Ok(Some(value)),
        Err(ServiceError::Unavailable(why)) if unavailable.len() + 1 < stores => {
            unavailable.push(format!(
                "the {store} store is unavailable, so its rows are not shown: {why}"
            ));
            Ok(None)
        }
        Err(err) => Err(err),
    }
}

impl From<StoreError> for ServiceError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::AlreadyExists(what) => {
                ServiceError::Conflict(format!("{what} already exists"))
            }
            // Transient: the client is told so (503) and may retry.
            other if other.fault() != StoreFault::Other => ServiceError::Unavailable(format!(
                "the store is unavailable ({}): {}; retry later",
                other.fault().as_str(),
                other.fault().explain()
            )),
            other => ServiceError::Internal(other.to_string()),
        }
    }
}

impl From<crate::routes::UrlError> for ServiceError {
    fn from(err: crate::routes::UrlError) -> Self {
        ServiceError::Invalid {
            field: err.field,
            message: err.message,
        }
    }
}

impl ServiceError {
    pub fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        ServiceError::Invalid {
            field,
            message: message.into(),
        }
    }
}

/// Writes a batch through `write`, one store write unit that answers each item in
/// order. A lost race (`StoreFault::Conflict`: a deadlock, a serialization
/// failure, a Galera certification conflict) is about one row, not the batch:
/// each item is then written again alone, so one contested item does not fail its
/// neighbours. Any other store failure fails every item (none was acknowledged).
pub(crate) async fn write_batched<I, O, F, Fut>(
    items: Vec<I>,
    write: F,
) -> Vec<Result<O, ServiceError>>
where
    I: Clone,
    F: Fn(Vec<I>) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<Result<O, ServiceError>>, StoreError>>,
{
    fn answered<O>(
        outputs: Vec<Result<O, ServiceError>>,
        n: usize,
    ) -> Vec<Result<O, ServiceError>> {
        if outputs.len() == n {
            return outputs;
        }
        (0..n)
            .map(|_| {
                Err(ServiceError::Internal(
                    "a batch item went unanswered".into(),
                ))
            })
            .collect()
    }
    let n = items.len();
    match write(items.clone()).await {
        Ok(outputs) => answered(outputs, n),
        Err(err) if n > 1 && err.fault() == StoreFault::Conflict => {
            let mut outputs = Vec::with_capacity(n);
            for item in items {
                outputs.extend(match write(vec![item]).await {
                    Ok(one) => answered(one, 1),
                    Err(err) => vec![Err(err.into())],
                });
            }
            outputs
        }
        Err(err) => {
            let err = ServiceError::from(err);
            (0..n).map(|_| Err(err.clone())).collect()
        }
    }
}

/// The one permission gate: returns the viewer when allowed.
pub fn require(viewer: Option<&Viewer>, permission: Permission) -> Result<&Viewer, ServiceError> {
    let viewer = viewer.ok_or(ServiceError::Unauthenticated)?;
    if viewer.can(permission) {
        Ok(viewer)
    } else {
        Err(ServiceError::Forbidden(permission))
    }
}

pub use crate::clock::format_ms;

/// Epoch milliseconds of an RFC 3339 instant or a `YYYY-MM-DD` day (UTC); with
/// `end_of_day`, a day means the instant its next day starts.
pub fn parse_instant(
    field: &'static str,
    value: &str,
    end_of_day: bool,
) -> Result<i64, ServiceError> {
    use time::format_description::well_known::Rfc3339;
    let value = value.trim();
    let instant = if let Ok(t) = time::OffsetDateTime::parse(value, &Rfc3339) {
        t
    } else {
        let day = time::Date::parse(
            value,
            time::macros::format_description!("[year]-[month]-[day]"),
        )
        .map_err(|_| {
            ServiceError::invalid(
                field,
                format!("{value:?} is not a date (YYYY-MM-DD) or an RFC 3339 time"),
            )
        })?;
        let day = if end_of_day {
            day.next_day().unwrap_or(day)
        } else {
            day
        };
        day.midnight().assume_utc()
    };
    Ok((instant.unix_timestamp_nanos() / 1_000_000) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vocab::Role;

    #[test]
    fn permissions_follow_the_role_table() {
        let reader = Viewer {
            name: "r".into(),
            role: Role::Reader,
        };
        let operator = Viewer {
            name: "o".into(),
            role: Role::Operator,
        };
        let admin = Viewer {
            name: "a".into(),
            role: Role::Admin,
        };
        assert!(require(Some(&reader), Permission::RunsRead).is_ok());
        assert!(matches!(
            require(Some(&reader), Permission::RunsWrite),
            Err(ServiceError::Forbidden(Permission::RunsWrite))
        ));
        assert!(require(Some(&operator), Permission::RunsWrite).is_ok());
        assert!(require(Some(&operator), Permission::DataRead).is_err());
        assert!(require(Some(&operator), Permission::UsersManage).is_err());
        assert!(require(Some(&reader), Permission::RecordsRead).is_ok());
        assert!(require(Some(&reader), Permission::RecordsWrite).is_err());
        assert!(require(Some(&reader), Permission::ApprovalsSubmit).is_err());
        assert!(require(Some(&operator), Permission::RecordsWrite).is_ok());
        assert!(require(Some(&operator), Permission::ApprovalsSubmit).is_ok());
        assert!(require(Some(&operator), Permission::DefinitionsManage).is_err());
        for p in [
            Permission::RunsRead,
            Permission::RunsWrite,
            Permission::UsersManage,
            Permission::DataRead,
            Permission::RecordsRead,
            Permission::RecordsWrite,
            Permission::ApprovalsSubmit,
            Permission::DefinitionsManage,
        ] {
            assert!(require(Some(&admin), p).is_ok());
        }
        assert!(matches!(
            require(None, Permission::RunsRead),
            Err(ServiceError::Unauthenticated)
        ));
    }

    #[test]
    fn instants_are_days_or_rfc3339() {
        assert_eq!(
            parse_instant("created_from", "2026-11-30", false).unwrap(),
            1_795_996_800_000
        );
        assert_eq!(
            parse_instant("created_to", "2026-11-30", true).unwrap(),
            1_795_996_800_000 + 86_400_000
        );
        assert_eq!(
            parse_instant("created_from", "2026-11-30T00:00:01Z", false).unwrap(),
            1_795_996_801_000
        );
        match parse_instant("created_to", "yesterday", true) {
            Err(ServiceError::Invalid { field, message }) => {
                assert_eq!(field, "created_to");
                assert!(message.contains("yesterday"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn formats_milliseconds_as_rfc3339() {
        assert_eq!(format_ms(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_ms(1_500), "1970-01-01T00:00:01.5Z");
    }
}
