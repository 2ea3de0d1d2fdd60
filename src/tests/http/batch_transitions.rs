//! `POST /api/v1/runs/transitions` over HTTP: one result per item, in order, each
//! with its own status; one bad item never fails the others; the limit and the
//! permission check hold for the whole request.

use herald::service::runs::MAX_BATCH_TRANSITIONS;
use serde_json::{json, Value};
use testkit::{create_run_via_api, json_of, TestServer};
use vocab::Role;

async fn create_run(client: &reqwest::Client, server: &TestServer, token: &str) -> String {
    create_run_via_api(client, &server.url(""), token, None).await
}

async fn run_status(client: &reqwest::Client, server: &TestServer, token: &str, id: &str) -> Value {
    let run = json_of(
        client
            .get(server.url(&format!("/api/v1/runs/{id}")))
            .bearer_auth(token),
    )
    .await;
    run["status"].clone()
}

async fn batch(
    client: &reqwest::Client,
    server: &TestServer,
    token: &str,
    body: Value,
) -> (u16, Value) {
    let resp = client
        .post(server.url("/api/v1/runs/transitions"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_item_gets_its_own_result_in_order() {
    let server = TestServer::start().await;
    let operator = server.token(Role::Operator).await;
    let client = reqwest::Client::new();
    let first = create_run(&client, &server, &operator).await;
    let second = create_run(&client, &server, &operator).await;
    let finished = create_run(&client, &server, &operator).await;
    let (status, _) = batch(
        &client,
        &server,
        &operator,
        json!({"transitions": [{"run_id": finished, "to": "failed"}]}),
    )
    .await;
    assert_eq!(status, 200);

    let (status, body) = batch(
        &client,
        &server,
        &operator,
        json!({"transitions": [
            {"run_id": first, "to": "succeeded", "result": {"rows": 3}},
            {"run_id": "no-such-run", "to": "succeeded"},
            {"run_id": finished, "to": "succeeded"},
            {"run_id": second, "to": "running"},
            {"run_id": finished, "to": "failed"},
        ]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let results = body["results"].as_array().unwrap();
    assert_eq!(results.len(), 5);
    assert_eq!(results[0]["status"], 200);
    assert_eq!(results[0]["run"]["id"], first.as_str());
    assert_eq!(results[0]["run"]["status"], "succeeded");
    assert_eq!(results[0]["replayed"], false);
    assert_eq!(results[1]["status"], 404);
    assert_eq!(results[1]["error"], "not_found");
    assert!(results[1]["message"]
        .as_str()
        .unwrap()
        .contains("no-such-run"));
    assert_eq!(results[2]["status"], 409);
    assert_eq!(results[2]["error"], "illegal_transition");
    assert_eq!(results[2]["current_status"], "failed");
    assert_eq!(results[3]["status"], 200);
    assert_eq!(results[3]["run"]["status"], "running");
    assert_eq!(results[4]["status"], 200);
    assert_eq!(results[4]["replayed"], true);

    // The items that succeeded really committed; the bad ones changed nothing.
    assert_eq!(
        run_status(&client, &server, &operator, &first).await,
        "succeeded"
    );
    assert_eq!(
        run_status(&client, &server, &operator, &finished).await,
        "failed"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_limit_and_the_permission_hold_for_the_whole_request() {
    let server = TestServer::start().await;
    let operator = server.token(Role::Operator).await;
    let reader = server.token(Role::Reader).await;
    let client = reqwest::Client::new();
    let run = create_run(&client, &server, &operator).await;

    let too_many: Vec<Value> = (0..=MAX_BATCH_TRANSITIONS)
        .map(|_| json!({"run_id": run, "to": "succeeded"}))
        .collect();
    let (status, body) = batch(
        &client,
        &server,
        &operator,
        json!({ "transitions": too_many }),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["field"], "transitions");
    assert!(
        body["message"].as_str().unwrap().contains("500"),
        "names the limit: {body}"
    );

    let (status, body) = batch(&client, &server, &operator, json!({ "transitions": [] })).await;
    assert_eq!(status, 400, "{body}");

    let (status, body) = batch(
        &client,
        &server,
        &operator,
        json!({"transitions": [{"run_id": run, "to": "exploded"}]}),
    )
    .await;
    assert_eq!(status, 400, "an unknown state is a bad request: {body}");

    let (status, body) = batch(
        &client,
        &server,
        &reader,
        json!({"transitions": [{"run_id": run, "to": "succeeded"}]}),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        run_status(&client, &server, &operator, &run).await,
        "queued",
        "nothing moved"
    );
    server.stop().await;
}
