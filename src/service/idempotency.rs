//! Idempotency keys on creates (issue 21): a producer whose answer was lost (a
//! timeout, a crash after the commit) sends the request again with the same
//! `Idempotency-Key` and gets the original answer instead of a second effect.
//! The key, its request's hash and the answer commit in the effect's own
//! transaction (`store::ports::IdempotencyKeys`), so no effect exists without
//! its key; keys are per principal (one producer's key never answers another).

use sha2::{Digest, Sha256};

use super::ServiceError;
use crate::store::ports::{IdempotencyKeys, KeyClaim, StoredAnswer, WriteTx};

/// The longest key accepted (Stripe's limit).
pub const MAX_KEY_LEN: usize = 255;

/// A key as the producer sent it, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// 1 to 255 visible ASCII characters.
    pub fn parse(value: &str) -> Result<IdempotencyKey, ServiceError> {
        if value.is_empty()
            || value.len() > MAX_KEY_LEN
            || !value.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(ServiceError::invalid(
                "Idempotency-Key",
                format!("must be 1 to {MAX_KEY_LEN} visible ASCII characters (no spaces)"),
            ));
        }
        Ok(IdempotencyKey(value.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// SHA-256 (hex) of a request as parsed: what a repeat must match.
pub fn request_hash<T: serde::Serialize>(request: &T) -> String {
    let text = serde_json::to_string(request).unwrap_or_default();
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// A create's answer: the original one on a repeat.
#[derive(Clone, Debug, PartialEq)]
pub struct Answered {
    pub status: u16,
    pub body: serde_json::Value,
    /// True when this is the answer of an earlier request with the key.
    pub replayed: bool,
}

/// The answer `stored` holds for a repeat of `operation` with `hash`, or why the
/// repeat is refused.
pub fn replay(
    key: &IdempotencyKey,
    operation: &str,
    hash: &str,
    stored: StoredAnswer,
) -> Result<Answered, ServiceError> {
    if stored.operation != operation || stored.request_hash != hash {
        return Err(ServiceError::KeyReused {
            key: key.as_str().to_string(),
        });
    }
    match (stored.status, stored.body) {
        (Some(status), Some(body)) => Ok(Answered {
            status,
            body: serde_json::from_str(&body)
                .map_err(|e| ServiceError::Internal(format!("stored answer: {e}")))?,
            replayed: true,
        }),
        // Claimed and answered in one transaction: a committed key always has its
        // answer.
        _ => Err(ServiceError::Internal(format!(
            "idempotency key {:?} has no answer",
            key.as_str()
        ))),
    }
}

/// One keyed request of one principal: the steps every keyed create takes, in
/// this order — [`Keyed::earlier`] before its transaction (a committed repeat is
/// answered without writing), then inside the effect's transaction
/// [`Keyed::claim_in`] before the effect and [`Keyed::answer_in`] after it.
pub struct Keyed {
    pub principal: String,
    pub key: IdempotencyKey,
    pub operation: &'static str,
    pub hash: String,
}

impl Keyed {
    pub fn new<T: serde::Serialize>(
        principal: &str,
        key: &IdempotencyKey,
        operation: &'static str,
        request: &T,
    ) -> Keyed {
        Keyed {
            principal: principal.to_string(),
            key: key.clone(),
            operation,
            hash: request_hash(request),
        }
    }

    /// The answer of an earlier request with this key, if one committed.
    pub async fn earlier(
        &self,
        keys: &dyn IdempotencyKeys,
    ) -> Result<Option<Answered>, ServiceError> {
        match keys.key_answer(&self.principal, self.key.as_str()).await? {
            Some(stored) => replay(&self.key, self.operation, &self.hash, stored).map(Some),
            None => Ok(None),
        }
    }

    /// Claims the key in `tx`: `None` if it is this request's (make the effect),
    /// or the answer of a twin that committed first.
    pub async fn claim_in(
        &self,
        keys: &dyn IdempotencyKeys,
        tx: &mut WriteTx,
    ) -> Result<Option<Answered>, ServiceError> {
        let claim = keys
            .claim_key_in(
                tx,
                &self.principal,
                self.key.as_str(),
                self.operation,
                &self.hash,
            )
            .await?;
        match claim {
            KeyClaim::Fresh => Ok(None),
            KeyClaim::Taken(stored) => {
                replay(&self.key, self.operation, &self.hash, stored).map(Some)
            }
        }
    }

    /// Records `body` with `status` as the key's answer, in the effect's `tx`.
    pub async fn answer_in<T: serde::Serialize>(
        &self,
        keys: &dyn IdempotencyKeys,
        tx: &mut WriteTx,
        status: u16,
        body: &T,
    ) -> Result<Answered, ServiceError> {
        let body = serde_json::to_value(body).map_err(|e| ServiceError::Internal(e.to_string()))?;
        keys.answer_key_in(
            tx,
            &self.principal,
            self.key.as_str(),
            status,
            &body.to_string(),
        )
        .await?;
        Ok(Answered {
            status,
            body,
            replayed: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_visible_ascii_and_bounded() {
        assert!(IdempotencyKey::parse("order-42/attempt:1").is_ok());
        for bad in ["", "has space", "tab\t", "é", &"k".repeat(256)] {
            assert!(IdempotencyKey::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_repeat_must_be_the_same_request() {
        let key = IdempotencyKey::parse("k").unwrap();
        let stored = StoredAnswer {
            operation: "create_run".into(),
            request_hash: request_hash(&serde_json::json!({"a": 1})),
            status: Some(201),
            body: Some("{\"id\":\"r\"}".into()),
        };
        let same = request_hash(&serde_json::json!({"a": 1}));
        let answer = replay(&key, "create_run", &same, stored.clone()).unwrap();
        assert_eq!((answer.status, answer.replayed), (201, true));
        let other = request_hash(&serde_json::json!({"a": 2}));
        assert!(matches!(
            replay(&key, "create_run", &other, stored.clone()),
            Err(ServiceError::KeyReused { .. })
        ));
        assert!(replay(&key, "submit_approval", &same, stored).is_err());
    }
}
