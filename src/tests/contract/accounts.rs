//! Accounts on SQLite, PostgreSQL and MariaDB: users unique by name, tokens found
//! only by the hash of their secret, sessions that upsert, expire and delete.

use herald::store::ports::{NewUser, SessionRepository, TokenRepository, UserRepository};
use herald::store::StoreError;
use testkit::TestDb;
use vocab::Role;

testkit::contract_tests!(
    users_are_unique_by_name,
    tokens_are_found_only_by_their_hash,
    sessions_upsert_expire_and_delete,
);

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

async fn sessions_upsert_expire_and_delete(db: &TestDb) {
    let store = db.store().await;
    let far = 32_503_680_000_000; // year 3000
    assert!(store.create_session("s1", "{}", far).await.unwrap());
    assert!(
        !store.create_session("s1", "{}", far).await.unwrap(),
        "ids never collide silently"
    );
    assert!(store.save_session("s1", "{\"a\":1}", far).await.unwrap());
    assert!(store.save_session("s1", "{\"a\":2}", far).await.unwrap());
    assert!(
        store.save_session("s1", "{\"a\":2}", far).await.unwrap(),
        "an unchanged save still finds its session"
    );
    assert_eq!(
        store.load_session("s1").await.unwrap(),
        Some(("{\"a\":2}".to_string(), far))
    );
    assert!(store.create_session("old", "{}", 1_000).await.unwrap());
    assert_eq!(
        store.load_session("old").await.unwrap(),
        None,
        "expired sessions do not load"
    );
    assert_eq!(store.delete_expired_sessions().await.unwrap(), 1);
    store.delete_session("s1").await.unwrap();
    assert_eq!(store.load_session("s1").await.unwrap(), None);
    // A request that loaded the session before its sign-out saves it afterwards.
    assert!(!store.save_session("s1", "{\"a\":3}", far).await.unwrap());
    assert_eq!(
        store.load_session("s1").await.unwrap(),
        None,
        "a deleted session stays deleted"
    );
    store.close().await;
}
