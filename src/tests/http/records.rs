//! The Records page (issue 23, item 7) on all three engines, through its server
//! functions and its served HTML, as a reader: an object's records newest first
//! in keyset pages, a record's fields and its approval history, designed states
//! for none, a missing record and a bad object, and a record id found by search
//! opening its record.

use herald::store::Engine;
use reqwest::StatusCode;
use serde_json::{json, Value};
use testkit::{api_token, call_server_fn as call, Receiver, TestDb, TestServer};
use vocab::Role;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_on_sqlite() {
    records_page(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_on_postgres() {
    records_page(Engine::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_on_mysql() {
    records_page(Engine::MySql).await;
}

fn config(receiver: &Receiver) -> tempfile::NamedTempFile {
    testkit::deal_approval_config(&receiver.url_for("approvals"), "", "")
}

fn ids(page: &Value) -> Vec<String> {
    page["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

async fn records_page(engine: Engine) {
    let receiver = Receiver::start().await;
    let file = config(&receiver);
    let path = file.path().to_path_buf();
    let server = TestServer::start_on(TestDb::new(engine).await, move |args| {
        args.config = Some(path);
        args.destination_allowlist = Some("127.0.0.0/8".into());
    })
    .await;
    let operator = api_token(&server.db.url, Role::Operator).await;
    let client = reqwest::Client::new();
    let reader = server.session(Role::Reader).await;

    // No records yet: the object approvals act on is chosen, and it is empty.
    let (status, empty) = call(&server, &reader, "records", &[]).await;
    assert_eq!(status, StatusCode::OK, "{empty}");
    assert_eq!(empty["objects"], json!(["Opportunity"]));
    assert_eq!(empty["object"], "Opportunity");
    assert_eq!(ids(&empty), Vec::<String>::new());
    let html = reader
        .get(server.url("/records"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(html.contains("No Opportunity records yet"), "{html}");

    // 51 records: a page of 50, newest first, then the oldest one.
    let mut created = Vec::new();
    for i in 0..51 {
        let resp = client
            .post(server.url("/api/v1/records/Opportunity"))
            .bearer_auth(&operator)
            .json(&json!({"fields": {"Name": format!("deal-{i}"), "Amount": i}}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::CREATED);
        let record: Value = resp.json().await.unwrap();
        created.push(record["id"].as_str().unwrap().to_string());
    }
    let newest_first: Vec<String> = created.iter().rev().cloned().collect();
    let (_, first) = call(&server, &reader, "records", &[("object", "Opportunity")]).await;
    assert_eq!(ids(&first), newest_first[..50]);
    let cursor = first["next_cursor"]
        .as_str()
        .expect("an older page")
        .to_string();
    let (_, second) = call(
        &server,
        &reader,
        "records",
        &[("object", "Opportunity"), ("before", &cursor)],
    )
    .await;
    assert_eq!(ids(&second), newest_first[50..]);
    assert_eq!(second["next_cursor"], Value::Null);

    // A record with its approval: fields, and the approval with its prompt.
    let newest = &created[50];
    let resp = client
        .post(server.url("/api/v1/approvals"))
        .bearer_auth(&operator)
        .json(&json!({"definition_id": "deal", "record_id": newest}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let approval: Value = resp.json().await.unwrap();
    let (status, detail) = call(
        &server,
        &reader,
        "record",
        &[("object", "Opportunity"), ("id", newest)],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    let fields = detail["record"]["fields"].as_array().unwrap();
    assert!(fields.contains(&json!({"name": "Name", "value": "\"deal-50\""})));
    let approvals = detail["approvals"].as_array().unwrap();
    assert_eq!(approvals.len(), 1, "{detail}");
    assert_eq!(approvals[0]["approval"]["id"], approval["id"]);
    assert_eq!(approvals[0]["approval"]["status"], "pending");
    assert_eq!(
        approvals[0]["can_decide"], false,
        "a reader decides nothing"
    );
    let (_, older) = call(
        &server,
        &reader,
        "record",
        &[("object", "Opportunity"), ("id", &created[0])],
    )
    .await;
    assert_eq!(older["approvals"], json!([]));

    // The page served whole, and its designed states.
    let page = reader
        .get(server.url(&format!("/records?object=Opportunity&id={newest}")))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    assert!(
        html.contains("deal-50") && html.contains("Approvals"),
        "{html}"
    );
    let missing = reader
        .get(server.url("/records?object=Opportunity&id=no-such-record"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert!(missing.text().await.unwrap().contains("Record not found"));
    for (args, want) in [
        (
            vec![("object", "Account"), ("id", newest.as_str())],
            StatusCode::NOT_FOUND,
        ),
        // System objects are Herald's own: they need data:read.
        (
            vec![("object", "_System_Run"), ("id", newest.as_str())],
            StatusCode::FORBIDDEN,
        ),
        (
            vec![("object", "not an object"), ("id", newest.as_str())],
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let (status, body) = call(&server, &reader, "record", &args).await;
        assert_eq!(status, want, "{args:?}: {body}");
    }
    let (status, body) = call(&server, &reader, "records", &[("object", "not an object")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("object"),
        "{body}"
    );

    // Signed out: the page sends to sign in, the call is refused.
    let anonymous = server.browser();
    let page = anonymous.get(server.url("/records")).send().await.unwrap();
    assert!(testkit::location(&page).starts_with("/login"));
    let (status, _) = call(&server, &anonymous, "records", &[]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // A record's id, searched, opens its record.
    let (_, answer) = call(&server, &reader, "find", &[("q", newest)]).await;
    assert_eq!(
        answer["found"][0]["opens"],
        format!("/records?object=Opportunity&id={newest}"),
        "{answer}"
    );
    server.stop().await;
}
