//! The run-approval scene (DESIGN §9) the HTTP and process tests share: a config
//! with a run definition whose step prompts a signed route on a real receiver,
//! and a producer that drives a run through the JSON API.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::receiver::Receiver;

/// The prompt route's signing secret (Standard Webhooks).
pub const PROMPT_SECRET: &str = "whsec_cHJvbXB0LXNlY3JldC1mb3ItcnVuLWFwcHJvdmFscw==";
/// The run callbacks' signing secret.
pub const CALLBACK_SECRET: &str = "whsec_Y2FsbGJhY2stc2VjcmV0LWZvci1ydW4tYXBwcm92YWxz";

/// The config file text: fast polls and retries, then [`definitions_text`].
pub fn config_text(receiver: &Receiver, prompt_secret_ref: &str) -> String {
    format!(
        "worker_poll_interval_ms = 50\n\
         maintenance_interval_ms = 100\n\
         initial_backoff_ms = 100\n\
         max_backoff_ms = 200\n\
         destination_allowlist = \"127.0.0.0/8\"\n{}",
        definitions_text(receiver, prompt_secret_ref)
    )
}

/// Routes and definitions (TOML tables: after any top-level setting): routes
/// `approvers` (prompts, signed) and `results` (a run's result) on `receiver`,
/// the run definition `payout` (runs of type `payout`, one step decided by an
/// admin, prompted on `approvers`) and the record definition `deal` (to be
/// refused for runs).
pub fn definitions_text(receiver: &Receiver, prompt_secret_ref: &str) -> String {
    format!(
        r#"
[[routes]]
name = "approvers"
channel = "webhook"
url = "{prompts}"
secret_ref = "{prompt_secret_ref}"

[[routes]]
name = "results"
channel = "webhook"
url = "{results}"

[[approval_definitions]]
id = "payout"
target = "run"
run_types = ["payout"]

[[approval_definitions.steps]]
name = "Finance"
approver = {{ role = "admin" }}
route = "approvers"

[[approval_definitions]]
id = "deal"
object = "Opportunity"

[[approval_definitions.steps]]
name = "Manager"
approver = {{ role = "admin" }}
"#,
        prompts = receiver.url_for("prompts"),
        results = receiver.url_for("results"),
    )
}

/// A producer on the JSON API of `base`, with its token.
pub struct Producer {
    pub base: String,
    pub token: String,
    pub client: reqwest::Client,
}

impl Producer {
    pub fn new(base: &str, token: &str) -> Producer {
        Producer {
            base: base.to_string(),
            token: token.to_string(),
            client: reqwest::Client::new(),
        }
    }

    pub async fn call(&self, token: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let url = format!("{}{path}", self.base);
        let request = match body {
            Some(body) => self.client.post(url).json(&body),
            None => self.client.get(url),
        };
        let resp = request.bearer_auth(token).send().await.unwrap();
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// Creates a run of `run_type` calling back `callback_url` and routed to
    /// `routes`, and moves it to `running`; returns its id.
    pub async fn running_run(&self, run_type: &str, callback_url: &str, routes: &[&str]) -> String {
        let (status, run) = self
            .call(
                &self.token,
                "/api/v1/runs",
                Some(json!({"type": run_type, "tenant": "acme",
                    "callback_url": callback_url, "routes": routes})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{run}");
        let id = run["id"].as_str().unwrap().to_string();
        let (status, moved) = self.transition(&id, json!({"to": "running"})).await;
        assert_eq!(status, StatusCode::OK, "{moved}");
        id
    }

    pub async fn transition(&self, run: &str, body: Value) -> (StatusCode, Value) {
        self.call(
            &self.token,
            &format!("/api/v1/runs/{run}/transitions"),
            Some(body),
        )
        .await
    }

    /// Moves `run` to `awaiting_approval` on `definition`.
    pub async fn ask_approval(&self, run: &str, definition: &str) -> (StatusCode, Value) {
        self.transition(
            run,
            json!({"to": "awaiting_approval", "approval": {"definition_id": definition}}),
        )
        .await
    }

    pub async fn run(&self, run: &str) -> Value {
        let (status, run) = self
            .call(&self.token, &format!("/api/v1/runs/{run}"), None)
            .await;
        assert_eq!(status, StatusCode::OK, "{run}");
        run
    }

    pub async fn approval(&self, token: &str, id: &str) -> (StatusCode, Value) {
        self.call(token, &format!("/api/v1/approvals/{id}"), None)
            .await
    }

    /// `approve`, `reject` or `recall` of approval `id` as `token`.
    pub async fn decide(&self, token: &str, id: &str, action: &str) -> (StatusCode, Value) {
        self.call(
            token,
            &format!("/api/v1/approvals/{id}/{action}"),
            Some(json!({})),
        )
        .await
    }
}
