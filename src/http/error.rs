//! How errors become HTTP responses: client errors carry a message that says what is
//! wrong; internal errors are logged and answered with a bare 500.

use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use app::port::ConsoleError;

use crate::service::ServiceError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub field: Option<&'static str>,
    /// The state the request conflicted with, for 409s.
    pub current_status: Option<&'static str>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            field: None,
            current_status: None,
        }
    }

    pub fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            field: Some(field),
            ..ApiError::new(StatusCode::BAD_REQUEST, "invalid", message)
        }
    }
}

impl From<ServiceError> for ApiError {
    fn from(err: ServiceError) -> Self {
        let message = err.to_string();
        match err {
            ServiceError::Unauthenticated => {
                ApiError::new(StatusCode::UNAUTHORIZED, "unauthenticated", message)
            }
            ServiceError::Forbidden(_) => {
                ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
            }
            ServiceError::Invalid { field, message } => {
                ApiError::invalid(field, format!("{field}: {message}"))
            }
            ServiceError::Refused(_) => ApiError::new(StatusCode::FORBIDDEN, "forbidden", message),
            ServiceError::Unavailable(_) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
            }
            // 501: the server (as configured) does not implement this; unlike a 503
            // it is not transient, so clients and probes should not retry it.
            ServiceError::CapabilityUnavailable(_) => ApiError::new(
                StatusCode::NOT_IMPLEMENTED,
                "capability_unavailable",
                message,
            ),
            ServiceError::NotFound(_) => ApiError::new(StatusCode::NOT_FOUND, "not_found", message),
            ServiceError::Conflict(_) => ApiError::new(StatusCode::CONFLICT, "conflict", message),
            ServiceError::DeliveryChanged { current, .. } => ApiError {
                current_status: Some(current.as_str()),
                ..ApiError::new(StatusCode::CONFLICT, "conflict", message)
            },
            ServiceError::IllegalTransition { current, .. } => ApiError {
                current_status: Some(current.as_str()),
                ..ApiError::new(StatusCode::CONFLICT, "illegal_transition", message)
            },
            ServiceError::TooLarge { field, .. } => ApiError {
                field: Some(field),
                ..ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message)
            },
            ServiceError::KeyReused { .. } => ApiError {
                field: Some("Idempotency-Key"),
                ..ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "idempotency_key_reused",
                    message,
                )
            },
            ServiceError::Throttled => {
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, "throttled", message)
            }
            ServiceError::BadCredentials => {
                ApiError::new(StatusCode::UNAUTHORIZED, "bad_credentials", message)
            }
            ServiceError::Internal(detail) => {
                tracing::error!(error = %detail, "internal error");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "internal error",
                )
            }
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let status = match &rejection {
            // A well-formed body with the wrong shape is still the client's bad request.
            JsonRejection::JsonDataError(_) => StatusCode::BAD_REQUEST,
            other => other.status(),
        };
        let code = match status {
            StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            _ => "malformed_json",
        };
        ApiError::new(status, code, rejection.body_text())
    }
}

/// Every error's JSON body: what went wrong in a word and a sentence, the field
/// to fix where one is at fault, and for a conflict the state it conflicted with.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// A stable code, e.g. `invalid`, `not_found`, `illegal_transition`.
    pub error: &'static str,
    /// What is wrong, for a person.
    pub message: String,
    /// The parameter, header or body field at fault.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<&'static str>,
    /// The state the request conflicted with (409s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_status: Option<&'static str>,
}

impl ApiError {
    pub fn error_body(&self) -> ErrorBody {
        ErrorBody {
            error: self.code,
            message: self.message.clone(),
            field: self.field,
            current_status: self.current_status,
        }
    }
}

/// What a 503 answer tells its client to wait before retrying, in seconds.
pub const RETRY_AFTER_SECS: &str = "1";

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.error_body())).into_response();
        // A 503 is transient (a store outage, hashing outpaced): say when to retry.
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static(RETRY_AFTER_SECS),
            );
        }
        response
    }
}

/// A service error as the console's pages see it: the same status and message
/// as the JSON API's.
pub fn console_error(err: ServiceError) -> ConsoleError {
    let api = ApiError::from(err);
    ConsoleError {
        status: api.status.as_u16(),
        message: api.message,
    }
}
