//! The OpenAPI 3.1 document of `/api/v1` and `/admin/api`, generated from the
//! handlers' own request and response types and served at `/api/openapi.json`.
//!
//! Each handler carries its own `#[utoipa::path]` (its success and its own error
//! answers, and the permission it needs); [`CommonAnswers`] adds the answers every
//! operation can give (credentials, permissions, malformed input, an unavailable
//! store), so they are described once and never forgotten on a new route.

use std::sync::OnceLock;

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};
use utoipa::{Modify, OpenApi, PartialSchema, ToSchema};

use super::error::ErrorBody;
use super::SESSION_COOKIE;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Herald API",
        description = "Runs, their transitions and the notifications they owe; records and their \
            approvals; the operators' outbox, audit trail and destination breakers. Every error \
            answers an `ErrorBody` whose `message` says what is wrong.",
        license(name = "MIT"),
    ),
    paths(
        super::runs::create_run,
        super::runs::list_runs,
        super::runs::get_run,
        super::runs::transition_run,
        super::runs::transition_runs,
        super::runs::run_deliveries,
        super::deliveries::retry_delivery,
        super::deliveries::skip_delivery,
        super::deliveries::blocked_lanes,
        super::approvals::list_records,
        super::approvals::create_record,
        super::approvals::get_record,
        super::approvals::update_record,
        super::approvals::list_definitions,
        super::approvals::put_definition,
        super::approvals::list_approvals,
        super::approvals::submit,
        super::approvals::get_approval,
        super::approvals::decide,
        super::approvals::replay_status,
        super::admin::list_outbox,
        super::export::events,
        super::export::audit,
        super::admin::retry_outbox_event,
        super::admin::list_audit,
        super::admin::list_breakers,
        super::admin::close_breaker,
    ),
    // Filter parameters' values: named by `value_type`, so listed here.
    components(schemas(vocab::DeliveryFilter, super::runs::RunStatusFilter)),
    modifiers(&CommonAnswers),
    security(("bearer" = []), ("session" = [])),
    tags(
        (name = "runs", description = "Runs and their transitions (seed 003)"),
        (name = "deliveries", description = "A delivery's manual retry and skip, and the blocked ordered lanes"),
        (name = "records", description = "The records approvals act on (seed 000)"),
        (name = "approvals", description = "Approval definitions and the approval lifecycle (seed 000)"),
        (name = "admin", description = "The operators' outbox, audit trail, breakers and replay shelf"),
    )
)]
pub struct ApiDoc;

/// `GET /api/openapi.json`: the document, to anyone (it holds no data), built
/// once.
pub async fn document() -> impl IntoResponse {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    let text =
        DOCUMENT.get_or_init(|| serde_json::to_string(&ApiDoc::openapi()).unwrap_or_default());
    ([(header::CONTENT_TYPE, "application/json")], text.as_str())
}

/// The answers any operation can give, added to every operation of the document,
/// and the two ways to authenticate.
struct CommonAnswers;

/// A shared answer: its status, its component name and what it means.
struct Common {
    status: &'static str,
    name: &'static str,
    description: &'static str,
    /// Only operations that take input (parameters or a body) give it.
    needs_input: bool,
    /// Only operations with a request body give it.
    needs_body: bool,
}

const COMMON: &[Common] = &[
    Common {
        status: "400",
        name: "BadRequest",
        description: "Bad input: a malformed query, header or JSON body, or a value out of range \
            (`field` names it)",
        needs_input: true,
        needs_body: false,
    },
    Common {
        status: "401",
        name: "Unauthenticated",
        description: "No valid credentials: send `Authorization: Bearer <API token>` (or sign in)",
        needs_input: false,
        needs_body: false,
    },
    Common {
        status: "403",
        name: "Forbidden",
        description: "The credentials lack the permission the operation needs, or a signed-in \
            browser's state-changing request came from another origin",
        needs_input: false,
        needs_body: false,
    },
    Common {
        status: "413",
        name: "TooLarge",
        description: "The body, or a field of it, is larger than this server takes",
        needs_input: true,
        needs_body: true,
    },
    Common {
        status: "415",
        name: "UnsupportedMediaType",
        description: "The body is not `application/json`",
        needs_input: true,
        needs_body: true,
    },
    Common {
        status: "500",
        name: "Internal",
        description: "An internal error (logged); nothing was committed",
        needs_input: false,
        needs_body: false,
    },
    Common {
        status: "501",
        name: "CapabilityUnavailable",
        description: "This server, as configured, does not offer it (e.g. a store without a \
            durable outbox); not transient",
        needs_input: false,
        needs_body: false,
    },
    Common {
        status: "503",
        name: "Unavailable",
        description:
            "A store is unavailable or busy, or (`overloaded`, producer API only) this server \
            serves as many API requests as it takes at once and recorded nothing of this one; \
            retry after `Retry-After` seconds",
        needs_input: false,
        needs_body: false,
    },
];

impl Modify for CommonAnswers {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("An API token (`herald token create`)"))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "session",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                SESSION_COOKIE,
                "The console's session, after signing in",
            ))),
        );
        components
            .schemas
            .insert(ErrorBody::name().into_owned(), ErrorBody::schema());
        for common in COMMON {
            components
                .responses
                .insert(common.name.to_string(), RefOr::T(common_response(common)));
        }
        for item in doc.paths.paths.values_mut() {
            let operations = [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.patch,
                &mut item.delete,
            ];
            for operation in operations.into_iter().flatten() {
                add_common_answers(operation);
            }
        }
    }
}

fn common_response(common: &Common) -> Response {
    let mut response = ResponseBuilder::new()
        .description(common.description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name(ErrorBody::name())))
                .build(),
        );
    if common.status == "503" {
        response = response.header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(u32::schema())
                .description(Some("Seconds to wait before retrying"))
                .build(),
        );
    }
    response.build()
}

fn add_common_answers(operation: &mut Operation) {
    let has_body = operation.request_body.is_some();
    let has_input = has_body
        || operation
            .parameters
            .as_ref()
            .is_some_and(|params| !params.is_empty());
    for common in COMMON {
        if (common.needs_input && !has_input) || (common.needs_body && !has_body) {
            continue;
        }
        operation
            .responses
            .responses
            .entry(common.status.to_string())
            .or_insert_with(|| RefOr::Ref(Ref::from_response_name(common.name)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_documents_its_permission_and_the_common_answers() {
        let doc = ApiDoc::openapi();
        let mut operations = 0;
        for (path, item) in &doc.paths.paths {
            for operation in [&item.get, &item.post, &item.patch].into_iter().flatten() {
                operations += 1;
                let description = operation.description.as_deref().unwrap_or_default();
                assert!(
                    description.contains("Needs `"),
                    "{path}: the description names no permission: {description}"
                );
                for status in ["401", "403", "500", "503"] {
                    assert!(
                        operation.responses.responses.contains_key(status),
                        "{path}: no {status} answer"
                    );
                }
            }
        }
        assert_eq!(operations, 27, "every routed operation is in the document");
    }
}
