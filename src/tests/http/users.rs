//! Users and tokens managed from the console (issue 23, item 6), on all three
//! engines, through the console's own server functions: an admin adds a user
//! (a password made and answered once), changes its role (live in its session),
//! disables it (its session ends; signing in fails exactly like a wrong password),
//! enables it, resets its password (old sessions and the old password end);
//! creates a token that works and revokes it (refused from the next request).
//! Nobody disables or demotes themselves, the last enabled admin stays, other
//! roles are refused (a forged call too), bad input is a 400 naming it, and every
//! change is in the audit trail with its actor and no secret.

use herald::store::Engine;
use reqwest::StatusCode;
use serde_json::Value;
use testkit::{call_server_fn as call, TestDb, TestServer};
use vocab::Role;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn users_and_tokens_on_sqlite() {
    users_and_tokens(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn users_and_tokens_on_postgres() {
    users_and_tokens(Engine::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn users_and_tokens_on_mysql() {
    users_and_tokens(Engine::MySql).await;
}

/// A browser signed in as `username`, or the sign-in's redirect when refused.
async fn sign_in(
    server: &TestServer,
    username: &str,
    password: &str,
) -> Result<reqwest::Client, String> {
    let browser = server.browser();
    let resp = browser
        .post(server.url("/auth/login"))
        .form(&[
            ("username", username),
            ("password", password),
            ("next", "/runs"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let location = resp.headers()[reqwest::header::LOCATION]
        .to_str()
        .unwrap()
        .to_string();
    if location == "/runs" {
        Ok(browser)
    } else {
        Err(location)
    }
}

/// Who a browser's session is now.
async fn who(server: &TestServer, browser: &reqwest::Client) -> Value {
    let (status, viewer) = call(server, browser, "viewer", &[]).await;
    assert_eq!(status, StatusCode::OK, "{viewer}");
    viewer
}

/// Whether the browser's session is over: its calls are unauthenticated (401)
/// and a console page sends it to sign in.
async fn session_ended(server: &TestServer, browser: &reqwest::Client) -> bool {
    let (status, _) = call(server, browser, "viewer", &[]).await;
    let page = browser.get(server.url("/runs")).send().await.unwrap();
    let to_sign_in = page
        .headers()
        .get(reqwest::header::LOCATION)
        .is_some_and(|l| l.to_str().unwrap().starts_with("/login"));
    status == StatusCode::UNAUTHORIZED && to_sign_in
}

fn user_id(accounts: &Value, username: &str) -> String {
    accounts["users"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["username"] == username)
        .unwrap_or_else(|| panic!("{username} listed: {accounts}"))["id"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn users_and_tokens(engine: Engine) {
    let server = TestServer::start_on(TestDb::new(engine).await, |_| {}).await;
    server
        .add_user("boss", "boss-password-123", Role::Admin)
        .await;
    let boss = sign_in(&server, "boss", "boss-password-123").await.unwrap();

    // The page, served whole: the users, and the designed state of no tokens.
    let page = boss.get(server.url("/users")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    assert!(
        html.contains("Users and tokens · Herald") && html.contains("data-username=\"boss\""),
        "{html}"
    );
    assert!(html.contains("No API tokens yet"), "{html}");

    // Add a user without a password: Herald makes one and answers it once.
    let (status, added) = call(
        &server,
        &boss,
        "user-add",
        &[("username", "ada"), ("role", "operator"), ("password", "")],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{added}");
    let made = added["secret"]
        .as_str()
        .expect("a made password")
        .to_string();
    assert!(made.len() >= 12, "{made}");
    let (_, accounts) = call(&server, &boss, "accounts", &[]).await;
    let ada_id = user_id(&accounts, "ada");
    let boss_row = accounts["users"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["username"] == "boss")
        .unwrap();
    assert_eq!(boss_row["is_you"], true);
    assert!(
        !accounts.to_string().contains("argon2") && !accounts.to_string().contains(&made),
        "no hash or password is listed: {accounts}"
    );
    let ada = sign_in(&server, "ada", &made).await.expect("ada signs in");
    assert_eq!(who(&server, &ada).await["role"], "operator");

    // Other roles are refused, the page and a forged call alike.
    for (endpoint, args) in [
        ("accounts", vec![]),
        (
            "user-add",
            vec![("username", "mallory"), ("role", "admin"), ("password", "")],
        ),
        (
            "user-change",
            vec![
                ("user_id", ada_id.as_str()),
                ("action", "role"),
                ("role", "admin"),
            ],
        ),
        ("token-create", vec![("name", "forged"), ("role", "admin")]),
    ] {
        let (status, body) = call(&server, &ada, endpoint, &args).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{endpoint}: {body}");
    }
    let page = ada.get(server.url("/users")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::FORBIDDEN);
    assert!(page
        .text()
        .await
        .unwrap()
        .contains("You do not have access to this page"));

    // A role change is live in the user's session.
    let (status, body) = call(
        &server,
        &boss,
        "user-change",
        &[("user_id", &ada_id), ("action", "role"), ("role", "reader")],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(who(&server, &ada).await["role"], "reader");

    // Disabled: the session ends, and signing in fails like a wrong password.
    let (status, body) = call(
        &server,
        &boss,
        "user-change",
        &[("user_id", &ada_id), ("action", "disable")],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(session_ended(&server, &ada).await, "the session ended");
    let refused = sign_in(&server, "ada", &made).await.unwrap_err();
    let wrong = sign_in(&server, "ada", "not-her-password")
        .await
        .unwrap_err();
    assert_eq!(
        refused, wrong,
        "a disabled user is told what a wrong password is"
    );
    assert!(refused.contains("error=invalid"), "{refused}");

    // Enabled again: a new sign-in works; the session from before stays over.
    call(
        &server,
        &boss,
        "user-change",
        &[("user_id", &ada_id), ("action", "enable")],
    )
    .await;
    let ada_again = sign_in(&server, "ada", &made).await.expect("enabled");
    assert!(session_ended(&server, &ada).await);
    assert_eq!(who(&server, &ada_again).await["name"], "ada");

    // A password reset: the given one works, the old one and old sessions end.
    let (status, body) = call(
        &server,
        &boss,
        "user-change",
        &[
            ("user_id", &ada_id),
            ("action", "reset_password"),
            ("password", "a-brand-new-password"),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["secret"],
        Value::Null,
        "a given password is not echoed"
    );
    assert!(session_ended(&server, &ada_again).await);
    assert!(sign_in(&server, "ada", &made).await.is_err());
    sign_in(&server, "ada", "a-brand-new-password")
        .await
        .expect("the new password");

    // Nobody disables or demotes themselves; the last enabled admin stays.
    let (_, accounts) = call(&server, &boss, "accounts", &[]).await;
    let boss_id = user_id(&accounts, "boss");
    let first_admin = user_id(&accounts, "admin");
    for args in [
        vec![("user_id", boss_id.as_str()), ("action", "disable")],
        vec![
            ("user_id", boss_id.as_str()),
            ("action", "role"),
            ("role", "operator"),
        ],
        vec![("user_id", boss_id.as_str()), ("action", "reset_password")],
    ] {
        let (status, body) = call(&server, &boss, "user-change", &args).await;
        assert_eq!(status, StatusCode::CONFLICT, "{body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("your own account"),
            "{body}"
        );
    }
    let (status, _) = call(
        &server,
        &boss,
        "user-change",
        &[("user_id", &first_admin), ("action", "disable")],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let admin_token = server.token(Role::Admin).await;
    let last = reqwest::Client::new()
        .post(server.url("/console-api/user-change"))
        .bearer_auth(&admin_token)
        .form(&[("user_id", boss_id.as_str()), ("action", "disable")])
        .send()
        .await
        .unwrap();
    assert_eq!(last.status(), StatusCode::CONFLICT);
    let last: Value = last.json().await.unwrap();
    assert!(
        last["message"]
            .as_str()
            .unwrap()
            .contains("last enabled admin"),
        "{last}"
    );

    // Bad input: a 400 naming what is wrong; a taken name: 409.
    for (endpoint, args, names) in [
        (
            "user-change",
            vec![("user_id", ada_id.as_str()), ("action", "promote")],
            "promote",
        ),
        (
            "user-change",
            vec![
                ("user_id", ada_id.as_str()),
                ("action", "role"),
                ("role", "owner"),
            ],
            "role",
        ),
        (
            "user-add",
            vec![
                ("username", "bad name!"),
                ("role", "reader"),
                ("password", ""),
            ],
            "username",
        ),
        (
            "user-add",
            vec![
                ("username", "bea"),
                ("role", "reader"),
                ("password", "short"),
            ],
            "password",
        ),
        (
            "token-create",
            vec![("name", ""), ("role", "reader")],
            "name",
        ),
    ] {
        let (status, body) = call(&server, &boss, endpoint, &args).await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "{endpoint} {args:?}: {body}"
        );
        assert!(
            body["message"].as_str().unwrap().contains(names),
            "{endpoint}: {body}"
        );
    }
    let (status, _) = call(
        &server,
        &boss,
        "user-add",
        &[("username", "ada"), ("role", "reader"), ("password", "")],
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = call(
        &server,
        &boss,
        "user-change",
        &[("user_id", "no-such-user"), ("action", "enable")],
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A token made here works until it is revoked.
    let (status, created) = call(
        &server,
        &boss,
        "token-create",
        &[("name", "deploy-bot"), ("role", "operator")],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let secret = created["secret"].as_str().unwrap().to_string();
    let runs = |token: String| {
        let url = server.url("/api/v1/runs");
        async move {
            reqwest::Client::new()
                .get(url)
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(runs(secret.clone()).await, StatusCode::OK);
    let (_, accounts) = call(&server, &boss, "accounts", &[]).await;
    let token = accounts["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "deploy-bot")
        .unwrap()
        .clone();
    assert_eq!(token["revoked_at"], Value::Null);
    assert!(!accounts.to_string().contains(&secret));
    let (status, body) = call(
        &server,
        &boss,
        "token-revoke",
        &[("token_id", token["id"].as_str().unwrap())],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(runs(secret.clone()).await, StatusCode::UNAUTHORIZED);

    // Every change is audited, by whom, and no secret is in the trail.
    let audit: Value = reqwest::Client::new()
        .get(server.url("/admin/api/audit?limit=200"))
        .bearer_auth(&admin_token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rows = audit["entries"].as_array().unwrap();
    let by_boss = |action: &str| {
        rows.iter()
            .filter(|row| row["action"] == action && row["actor"] == "boss")
            .count()
    };
    for (action, count) in [
        ("add_user", 1),
        ("change_role", 1),
        ("disable_user", 2),
        ("enable_user", 1),
        ("reset_password", 1),
        ("create_token", 1),
        ("revoke_token", 1),
    ] {
        assert_eq!(by_boss(action), count, "{action}: {audit}");
    }
    let text = audit.to_string();
    for secret in [made.as_str(), secret.as_str(), "a-brand-new-password"] {
        assert!(
            !text.contains(secret),
            "a secret in the audit trail: {text}"
        );
    }
    assert!(
        rows.iter()
            .all(|row| row["action"] != "disable_user" || row["event_id"] != "user boss"),
        "the refused changes wrote no row"
    );
}
