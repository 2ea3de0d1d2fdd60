//! Blocked ordered lanes over HTTP (issue 22, docs/ORDERING.md §6): the list for
//! readers, the skip for operators, and every refusal a clear 4xx that changes
//! nothing, against a real server whose store holds a lane blocked by a failed head.

use reqwest::StatusCode;
use serde_json::{json, Value};
use testkit::{claim, claim_request, enqueue, settlement, test_event, TestServer};
use vocab::Role;

use herald::outbox::model::{NewEvent, Settle};
use herald::store::ports::OutboxStore;

const LANE: &str = "route:ordered:tenant:acme";

fn laned(id: &str) -> NewEvent {
    NewEvent {
        lane: Some(LANE.to_string()),
        ..test_event(id)
    }
}

#[tokio::test]
async fn a_blocked_lane_is_listed_and_an_operator_skips_its_head_with_a_reason() {
    let server = TestServer::start().await;
    let store = server.db.store().await;
    // Arranged: h1 heads the lane and failed for good; h2 waits behind it.
    enqueue(&store, &[laned("h1")]).await;
    enqueue(&store, &[laned("h2")]).await;
    let head = claim(&store, &claim_request(10, 30_000)).await;
    assert_eq!(head.len(), 1, "only the head is claimable");
    let accepted = store
        .settle(&[settlement(&head[0], Settle::Failed { exhausted: true })])
        .await
        .unwrap();
    assert_eq!(accepted, vec![true]);

    let client = reqwest::Client::new();
    let reader = server.token(Role::Reader).await;
    let operator = server.token(Role::Operator).await;
    let list = |token: String| {
        let request = client
            .get(server.url("/api/v1/lanes/blocked"))
            .bearer_auth(token);
        async move {
            let resp = request.send().await.unwrap();
            assert_eq!(resp.status(), StatusCode::OK);
            resp.json::<Value>().await.unwrap()
        }
    };
    let seen = list(reader.clone()).await;
    assert_eq!(seen["open_lanes"], 1, "{seen}");
    assert_eq!(seen["lanes"][0]["lane"], LANE, "{seen}");
    assert_eq!(seen["lanes"][0]["head"]["event_id"], "h1");
    assert_eq!(seen["lanes"][0]["head"]["status"], "failed");
    assert_eq!(seen["lanes"][0]["waiting"], 1);
    assert_eq!(seen["lanes"][0]["can_act"], false, "a reader may not act");
    assert_eq!(list(operator.clone()).await["lanes"][0]["can_act"], true);
    let cycle = seen["lanes"][0]["head"]["cycle"].as_i64().unwrap();

    let skip = |token: &str, body: Value| {
        client
            .post(server.url("/api/v1/deliveries/h1/skip"))
            .bearer_auth(token)
            .json(&body)
            .send()
    };
    let good = json!({"kind": "test", "expected_status": "failed", "expected_cycle": cycle,
                      "reason": "the receiver retired this endpoint"});
    // Refusals, each saying what is wrong, none changing anything.
    let refusals = [
        (
            reader.as_str(),
            good.clone(),
            StatusCode::FORBIDDEN,
            "runs:write",
        ),
        (
            operator.as_str(),
            json!({"kind": "test", "expected_status": "failed", "reason": "  "}),
            StatusCode::BAD_REQUEST,
            "reason",
        ),
        (
            operator.as_str(),
            json!({"kind": "test", "expected_status": "failed"}),
            StatusCode::BAD_REQUEST,
            "reason",
        ),
        (
            operator.as_str(),
            json!({"kind": "test", "expected_status": "pending", "reason": "x"}),
            StatusCode::BAD_REQUEST,
            "cannot be skipped",
        ),
        (
            operator.as_str(),
            json!({"kind": "test", "expected_status": "failed", "expected_cycle": cycle + 1, "reason": "x"}),
            StatusCode::CONFLICT,
            "retried since you looked",
        ),
        (
            operator.as_str(),
            json!({"kind": "test", "expected_status": "failed", "reason": "x".repeat(501)}),
            StatusCode::BAD_REQUEST,
            "at most 500",
        ),
        (
            operator.as_str(),
            json!({"kind": "test", "expected_status": "failed", "reason": "x", "force": true}),
            StatusCode::BAD_REQUEST,
            "force",
        ),
    ];
    for (token, body, status, says) in refusals {
        let resp = skip(token, body.clone()).await.unwrap();
        assert_eq!(resp.status(), status, "{body}");
        let text = resp.text().await.unwrap();
        assert!(text.contains(says), "{body}: {text}");
    }
    assert_eq!(
        list(reader.clone()).await["lanes"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert!(claim(&store, &claim_request(10, 30_000)).await.is_empty());

    // The skip: answered with the delivery, skipped; the lane goes on with h2.
    let resp = skip(&operator, good.clone()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let skipped: Value = resp.json().await.unwrap();
    assert_eq!(skipped["status"], "skipped", "{skipped}");
    let after = list(reader.clone()).await;
    assert_eq!(after["lanes"], json!([]), "{after}");
    assert_eq!(after["open_lanes"], 1, "h2 is still open");
    let next = claim(&store, &claim_request(10, 30_000)).await;
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].event_id, "h2");

    // Audited with the reason, by the operator's token name.
    let audit: Value = client
        .get(server.url("/admin/api/audit"))
        .bearer_auth(&operator)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let entries = audit["entries"].as_array().expect("entries");
    let row = entries
        .iter()
        .find(|e| e["action"] == "skip")
        .unwrap_or_else(|| panic!("no skip audited: {audit}"));
    assert_eq!(row["event_id"], "h1");
    assert_eq!(row["from_status"], "failed");
    assert_eq!(row["reason"], "the receiver retired this endpoint");
    assert_eq!(entries.iter().filter(|e| e["action"] == "skip").count(), 1);

    // The same skip again: the delivery changed since that view.
    let again = skip(&operator, good).await.unwrap();
    assert_eq!(again.status(), StatusCode::CONFLICT);
    store.close().await;
    server.stop().await;
}
