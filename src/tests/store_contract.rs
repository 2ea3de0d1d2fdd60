//! The storage contract: every engine must pass every test here.

use herald::store::ports::{
    NewRun, NewUser, RunFilter, RunRepository, SessionRepository, TokenRepository, UserRepository,
};
use herald::store::StoreError;
use vocab::{Role, RunStatus};

use crate::support::TestDb;

crate::contract_tests!(
    migrations_are_idempotent_and_make_the_store_ready,
    users_are_unique_by_name,
    tokens_are_found_only_by_their_hash,
    runs_page_newest_first_without_gaps_or_repeats,
    runs_filter_by_type_and_status,
    sessions_upsert_expire_and_delete,
);

async fn migrations_are_idempotent_and_make_the_store_ready(db: &TestDb) {
    let store = db.store().await;
    assert!(store.is_ready().await);
    store.migrate().await.expect("second migrate is a no-op");
    assert!(store.is_ready().await);
    store.close().await;
}

async fn users_are_unique_by_name(db: &TestDb) {
    let store = db.store().await;
    assert_eq!(store.count_users().await.unwrap(), 0);
    let user = store
        .create_user(NewUser {
            username: "ada".into(),
            password_hash: "h1".into(),
            role: Role::Operator,
        })
        .await
        .unwrap();
    assert_eq!(user.role, Role::Operator);
    let again = store
        .create_user(NewUser {
            username: "ada".into(),
            password_hash: "h2".into(),
            role: Role::Reader,
        })
        .await;
    assert!(
        matches!(again, Err(StoreError::AlreadyExists(_))),
        "{again:?}"
    );
    let found = store.user_by_name("ada").await.unwrap().expect("by name");
    assert_eq!(found.id, user.id);
    assert_eq!(found.password_hash, "h1");
    assert!(store.user_by_id(&user.id).await.unwrap().is_some());
    assert!(
        store.user_by_name("ADA").await.unwrap().is_none(),
        "names are exact"
    );
    assert_eq!(store.count_users().await.unwrap(), 1);
    store.close().await;
}

async fn tokens_are_found_only_by_their_hash(db: &TestDb) {
    let store = db.store().await;
    let token = store
        .create_token("ci", Role::Reader, "abc123")
        .await
        .unwrap();
    assert_eq!(token.name, "ci");
    let found = store.token_by_hash("abc123").await.unwrap().expect("found");
    assert_eq!(found.id, token.id);
    assert_eq!(found.role, Role::Reader);
    assert!(store.token_by_hash("abc124").await.unwrap().is_none());
    store.close().await;
}

async fn runs_page_newest_first_without_gaps_or_repeats(db: &TestDb) {
    let store = db.store().await;
    let mut created = Vec::new();
    for i in 0..25 {
        let run = store
            .create_run(NewRun {
                run_type: "etl".into(),
                tenant: format!("t{i}"),
                callback_url: Some("https://example.com/hook".into()),
                routes: vec!["ops".into()],
            })
            .await
            .unwrap();
        assert_eq!(run.status, RunStatus::Queued);
        created.push(run.id);
    }
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = store
            .list_runs(&RunFilter {
                before_id: before.clone(),
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        if page.is_empty() {
            break;
        }
        before = page.last().map(|r| r.id.clone());
        seen.extend(page.into_iter().map(|r| r.id));
    }
    created.reverse();
    assert_eq!(seen, created, "newest first, every run exactly once");
    let run = store.get_run(&created[0]).await.unwrap().expect("get");
    assert_eq!(
        run.callback_url.as_deref(),
        Some("https://example.com/hook")
    );
    assert!(store.get_run("nope").await.unwrap().is_none());
    store.close().await;
}

async fn runs_filter_by_type_and_status(db: &TestDb) {
    let store = db.store().await;
    for run_type in ["etl", "etl", "report"] {
        store
            .create_run(NewRun {
                run_type: run_type.into(),
                tenant: "acme".into(),
                callback_url: None,
                routes: Vec::new(),
            })
            .await
            .unwrap();
    }
    let etl = store
        .list_runs(&RunFilter {
            run_type: Some("etl".into()),
            limit: 50,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(etl.len(), 2);
    assert!(etl.iter().all(|r| r.run_type == "etl"));
    let queued = store
        .list_runs(&RunFilter {
            status: Some(RunStatus::Queued),
            limit: 50,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(queued.len(), 3);
    let failed = store
        .list_runs(&RunFilter {
            status: Some(RunStatus::Failed),
            limit: 50,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(failed.is_empty());
    assert_eq!(
        store.run_types().await.unwrap(),
        vec!["etl".to_string(), "report".to_string()]
    );
    store.close().await;
}

async fn sessions_upsert_expire_and_delete(db: &TestDb) {
    let store = db.store().await;
    let far = 32_503_680_000_000; // year 3000
    assert!(store.create_session("s1", "{}", far).await.unwrap());
    assert!(
        !store.create_session("s1", "{}", far).await.unwrap(),
        "ids never collide silently"
    );
    store.save_session("s1", "{\"a\":1}", far).await.unwrap();
    store.save_session("s1", "{\"a\":2}", far).await.unwrap();
    assert_eq!(
        store.load_session("s1").await.unwrap(),
        Some(("{\"a\":2}".to_string(), far))
    );
    store.save_session("old", "{}", 1_000).await.unwrap();
    assert_eq!(
        store.load_session("old").await.unwrap(),
        None,
        "expired sessions do not load"
    );
    assert_eq!(store.delete_expired_sessions().await.unwrap(), 1);
    store.delete_session("s1").await.unwrap();
    assert_eq!(store.load_session("s1").await.unwrap(), None);
    store.close().await;
}
