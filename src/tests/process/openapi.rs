//! The OpenAPI document (issue 24, items 2 and 3), checked by independent tools
//! against a real `herald serve`: `openapi-spec-validator` validates the document
//! it serves, and `schemathesis` (both from PyPI, installed by .ci/install-deps)
//! fuzzes every operation with an operator's token, checking that no input
//! gets a 5xx, that every answer (status, headers, content type, body) matches
//! the document, that schema-violating input gets a 4xx, and that the
//! credentials are not ignored.

use std::process::Command;

use herald::store::Engine;
use serde_json::{json, Value};
use testkit::{api_token, json_of, wait_for, HeraldProcess, Receiver, TestDb};
use vocab::Role;

const SECRET: &str = "whsec_b3BlbmFwaS1mdXp6LWNhbGxiYWNrLXNlY3JldA==";

/// A Herald of the test's own, on its own SQLite file, with callbacks allowed to
/// loopback.
async fn herald() -> (HeraldProcess, String, TestDb) {
    let db = TestDb::new(Engine::Sqlite).await;
    let mut herald = HeraldProcess::spawn_for_loopback_callbacks(&db.url, SECRET);
    let base = herald.ready().await;
    (herald, base, db)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_document_passes_openapi_spec_validator() {
    let (_herald, base, _db) = herald().await;
    // No credentials: the document holds no data.
    let answer = reqwest::get(format!("{base}/api/openapi.json"))
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let document: Value = answer.json().await.unwrap();
    assert_eq!(document["openapi"], "3.1.0");
    let paths = document["paths"].as_object().unwrap();
    for path in [
        "/api/v1/runs",
        "/api/v1/runs/{id}/transitions",
        "/api/v1/runs/transitions",
        "/api/v1/approvals/{id}/{decision}",
        "/admin/api/notification-outbox/export",
        "/admin/api/destination-breakers/close",
    ] {
        assert!(paths.contains_key(path), "{path} is not documented");
    }

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("openapi.json");
    std::fs::write(&file, document.to_string()).unwrap();
    let out = Command::new("python3")
        .args(["-m", "openapi_spec_validator"])
        .arg(&file)
        .output()
        .expect("python3 with openapi-spec-validator (installed by .ci/install-deps)");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("OK"), "{text}");

    // The validator does refuse a broken document: a reference to nothing.
    let mut broken = document.clone();
    broken["paths"]["/api/v1/runs"]["get"]["responses"]["200"]["content"]["application/json"]
        ["schema"] = json!({"$ref": "#/components/schemas/Nothing"});
    std::fs::write(&file, broken.to_string()).unwrap();
    let out = Command::new("python3")
        .args(["-m", "openapi_spec_validator"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success(), "a dangling reference passed");
}

/// The ids schemathesis is given, so that its cases reach real rows (a run, an
/// approval waiting on the operator, a record, a failed delivery) and not only
/// 404s.
struct Arranged {
    run: String,
    approval: String,
    record: String,
    failed_event: String,
}

async fn arrange(base: &str, db: &TestDb, receiver: &Receiver) -> Arranged {
    let client = reqwest::Client::new();
    let admin = api_token(&db.url, Role::Admin).await;
    let operator = api_token(&db.url, Role::Operator).await;
    let post = |token: &str, path: &str, body: Value| {
        client
            .post(format!("{base}{path}"))
            .bearer_auth(token)
            .json(&body)
    };
    json_of(post(
        &admin,
        "/api/v1/approval-definitions",
        json!({"id": "deal", "object": "Account",
               "steps": [{"name": "review", "approver": {"role": "operator"}}]}),
    ))
    .await;
    let record = json_of(post(
        &operator,
        "/api/v1/records/Account",
        json!({"fields": {"Name": "Acme"}}),
    ))
    .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let approval = json_of(post(
        &operator,
        "/api/v1/approvals",
        json!({"definition_id": "deal", "record_id": record}),
    ))
    .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let run = testkit::create_run_via_api(&client, base, &operator, None).await;

    // A delivery that failed for good (the receiver refuses with a 410).
    receiver.set_status(410);
    let failing =
        testkit::create_run_via_api(&client, base, &operator, Some(&receiver.url())).await;
    let moved = json_of(post(
        &operator,
        &format!("/api/v1/runs/{failing}/transitions"),
        json!({"to": "failed"}),
    ))
    .await;
    let failed_event = moved["notifications"][0].as_str().unwrap().to_string();
    wait_for(
        "the callback failed",
        std::time::Duration::from_secs(30),
        async || {
            let page: Value = client
                .get(format!(
                    "{base}/admin/api/notification-outbox?status=failed"
                ))
                .bearer_auth(&operator)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            page["events"]
                .as_array()
                .is_some_and(|events| events.iter().any(|e| e["event_id"] == failed_event))
        },
    )
    .await;
    Arranged {
        run,
        approval,
        record,
        failed_event,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_server_error_and_no_answer_off_the_document() {
    let receiver = Receiver::start().await;
    let (_herald, base, db) = herald().await;
    let ids = arrange(&base, &db, &receiver).await;
    let token = api_token(&db.url, Role::Operator).await;

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("schemathesis.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[[operations]]
include-path-regex = "^/api/v1/runs/"
parameters = {{ "path.id" = "{run}" }}

[[operations]]
include-path-regex = "^/api/v1/approvals/"
parameters = {{ "path.id" = "{approval}" }}

[[operations]]
include-path-regex = "^/api/v1/records/"
parameters = {{ "path.object" = "Account", "path.id" = "{record}" }}

[[operations]]
include-path-regex = "/(retry|skip)$"
parameters = {{ "path.event_id" = "{event}" }}
"#,
            run = ids.run,
            approval = ids.approval,
            record = ids.record,
            event = ids.failed_event,
        ),
    )
    .unwrap();

    // Every check but `positive_data_acceptance`: the API refuses some requests
    // the schema can't describe as invalid (a cursor it never handed out, an
    // unknown definition, an uncertain retry without the acknowledgement),
    // with a 400 naming the field, as it should.
    let out = Command::new("schemathesis")
        .arg("--config-file")
        .arg(&config)
        .arg("run")
        .arg(format!("{base}/api/openapi.json"))
        .args(["--header", &format!("Authorization: Bearer {token}")])
        .args([
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance",
        ])
        .args(["--max-examples", "40", "--generation-database", "none"])
        .args(["--no-color"])
        .current_dir(dir.path())
        .output()
        .expect("schemathesis (PyPI, installed by .ci/install-deps)");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "schemathesis found failures:\n{text}");
    assert!(
        text.contains("Tested: 27"),
        "not every operation was tested:\n{text}"
    );
}
