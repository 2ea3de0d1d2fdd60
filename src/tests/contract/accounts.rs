//! Accounts on SQLite, PostgreSQL and MariaDB: users unique by name, tokens found
//! only by the hash of their secret, sessions that upsert, expire and delete.

use herald::store::ports::{
    DeliveryReads, NewAuditEntry, NewUser, SessionRepository, TokenRepository, UserChange,
    UserChangeRefusal, UserRepository,
};
use herald::store::{SqlStore, StoreError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use herald::auth::throttle::LoginThrottle;
use herald::auth::token_cache::TokenCache;
use herald::service::accounts::{AccountService, Actor};
use testkit::faults::InsertFault;
use testkit::TestDb;
use vocab::{Role, Viewer};

testkit::contract_tests!(
    users_are_unique_by_name,
    tokens_are_found_only_by_their_hash,
    sessions_upsert_expire_and_delete,
    user_changes_are_audited_in_their_transaction,
    the_last_enabled_admin_cannot_be_taken_out,
    an_account_change_whose_audit_row_fails_changes_nothing,
    admins_demoting_each_other_at_once_leave_one,
    revoked_tokens_authenticate_nothing_and_stay_listed,
    a_token_revoked_on_another_node_is_refused_there_once_its_cache_entry_expires,
);

fn audit(subject: &str, action: &str) -> NewAuditEntry {
    NewAuditEntry {
        subject: subject.into(),
        action: action.into(),
        actor: "test-admin".into(),
        from_status: "new".into(),
        acknowledged_duplicate_risk: false,
        affected: 1,
        reason: None,
    }
}

async fn add(store: &SqlStore, name: &str, role: Role) -> herald::store::ports::User {
    store
        .create_user(
            NewUser {
                username: name.into(),
                password_hash: format!("hash-of-{name}"),
                role,
            },
            &audit(&format!("user {name}"), "add_user"),
        )
        .await
        .unwrap()
}

/// The audit rows of `action`, oldest first, as (subject, from_status).
async fn audited(store: &SqlStore, action: &str) -> Vec<(String, String)> {
    let mut rows: Vec<_> = store
        .audit(None, 500)
        .await
        .unwrap()
        .into_iter()
        .filter(|row| row.action == action)
        .map(|row| (row.event_id, row.from_status))
        .collect();
    rows.reverse();
    rows
}

async fn users_are_unique_by_name(db: &TestDb) {
    let store = db.store().await;
    assert_eq!(store.count_users().await.unwrap(), 0);
    let user = store
        .create_user(
            NewUser {
                username: "ada".into(),
                password_hash: "h1".into(),
                role: Role::Operator,
            },
            &audit("user ada", "add_user"),
        )
        .await
        .unwrap();
    assert_eq!(user.role, Role::Operator);
    let again = store
        .create_user(
            NewUser {
                username: "ada".into(),
                password_hash: "h2".into(),
                role: Role::Reader,
            },
            &audit("user ada", "add_user"),
        )
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
    assert_eq!(
        audited(&store, "add_user").await,
        vec![("user ada".to_string(), "new".to_string())],
        "the refused twin wrote no audit row"
    );
    store.close().await;
}

async fn tokens_are_found_only_by_their_hash(db: &TestDb) {
    let store = db.store().await;
    let token = store
        .create_token(
            "ci",
            Role::Reader,
            "abc123",
            &audit("reader token", "create_token"),
        )
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

async fn user_changes_are_audited_in_their_transaction(db: &TestDb) {
    let store = db.store().await;
    let _admin = add(&store, "root", Role::Admin).await;
    let ada = add(&store, "ada", Role::Operator).await;
    assert_eq!((ada.session_epoch, ada.disabled_at_ms), (0, None));

    let (before, after) = store
        .change_user(
            &ada.id,
            &UserChange::Role(Role::Reader),
            &audit("user ada → reader", "change_role"),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!((before.role, after.role), (Role::Operator, Role::Reader));
    assert_eq!(after.session_epoch, 0, "a role change keeps the sessions");
    assert_eq!(
        audited(&store, "change_role").await,
        vec![("user ada → reader".to_string(), "operator".to_string())]
    );

    let (_, disabled) = store
        .change_user(
            &ada.id,
            &UserChange::Disabled(true),
            &audit("user ada", "disable_user"),
        )
        .await
        .unwrap()
        .unwrap();
    assert!(disabled.is_disabled());
    assert_eq!(disabled.session_epoch, 1, "a disable ends the sessions");
    // Disabling again changes nothing and writes no second row.
    let (_, again) = store
        .change_user(
            &ada.id,
            &UserChange::Disabled(true),
            &audit("user ada", "disable_user"),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.session_epoch, 1);
    assert_eq!(
        audited(&store, "disable_user").await,
        vec![("user ada".to_string(), "enabled".to_string())]
    );

    let (_, enabled) = store
        .change_user(
            &ada.id,
            &UserChange::Disabled(false),
            &audit("user ada", "enable_user"),
        )
        .await
        .unwrap()
        .unwrap();
    assert!(!enabled.is_disabled());
    assert_eq!(enabled.session_epoch, 1, "enabling revives no old session");

    let (_, reset) = store
        .change_user(
            &ada.id,
            &UserChange::Password("new-hash".into()),
            &audit("user ada", "reset_password"),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reset.password_hash, "new-hash");
    assert_eq!(reset.session_epoch, 2);
    assert_eq!(
        audited(&store, "reset_password").await,
        vec![("user ada".to_string(), "enabled".to_string())]
    );
    assert_eq!(
        store
            .change_user(
                "no-such-user",
                &UserChange::Disabled(true),
                &audit("user x", "disable_user")
            )
            .await
            .unwrap()
            .unwrap_err(),
        UserChangeRefusal::NotFound
    );
    let names: Vec<String> = store
        .list_users(10)
        .await
        .unwrap()
        .into_iter()
        .map(|u| u.username)
        .collect();
    assert_eq!(names, ["ada", "root"]);
    store.close().await;
}

async fn the_last_enabled_admin_cannot_be_taken_out(db: &TestDb) {
    let store = db.store().await;
    let root = add(&store, "root", Role::Admin).await;
    for change in [UserChange::Role(Role::Operator), UserChange::Disabled(true)] {
        let refused = store
            .change_user(&root.id, &change, &audit("user root", "change"))
            .await
            .unwrap();
        assert_eq!(refused.unwrap_err(), UserChangeRefusal::LastAdmin);
    }
    // A disabled admin does not count: with only one enabled, it is still the last.
    let spare = add(&store, "spare", Role::Admin).await;
    store
        .change_user(
            &spare.id,
            &UserChange::Disabled(true),
            &audit("user spare", "disable_user"),
        )
        .await
        .unwrap()
        .unwrap();
    let refused = store
        .change_user(
            &root.id,
            &UserChange::Role(Role::Reader),
            &audit("user root", "change_role"),
        )
        .await
        .unwrap();
    assert_eq!(refused.unwrap_err(), UserChangeRefusal::LastAdmin);
    // Its password can still be reset.
    assert!(store
        .change_user(
            &root.id,
            &UserChange::Password("h".into()),
            &audit("user root", "reset_password")
        )
        .await
        .unwrap()
        .is_ok());
    assert!(
        audited(&store, "change").await.is_empty(),
        "refusals write no audit row"
    );
    store.close().await;
}

/// Two admins, each demoting the other at the same moment, many times over: the
/// store serialises them (the shared change row, then the admins' rows), so one
/// always stays. The two transactions overlap by chance, not by force: without
/// the serialisation, rounds on PostgreSQL and MariaDB would let both through.
async fn admins_demoting_each_other_at_once_leave_one(db: &TestDb) {
    let store = std::sync::Arc::new(db.store().await);
    for round in 0..8 {
        let a = add(&store, &format!("a{round}"), Role::Admin).await;
        let b = add(&store, &format!("b{round}"), Role::Admin).await;
        // Only these two are enabled admins this round.
        let others: Vec<_> = store
            .list_users(100)
            .await
            .unwrap()
            .into_iter()
            .filter(|u| u.role == Role::Admin && !u.is_disabled() && u.id != a.id && u.id != b.id)
            .collect();
        for other in others {
            store
                .change_user(
                    &other.id,
                    &UserChange::Disabled(true),
                    &audit("user", "disable_user"),
                )
                .await
                .unwrap()
                .unwrap();
        }
        let demote = |id: String| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .change_user(
                        &id,
                        &UserChange::Role(Role::Operator),
                        &audit("user", "change_role"),
                    )
                    .await
                    .unwrap()
                    .map(|_| ())
            })
        };
        let (first, second) = tokio::join!(demote(a.id.clone()), demote(b.id.clone()));
        let outcomes = [first.unwrap(), second.unwrap()];
        assert_eq!(
            outcomes.iter().filter(|o| o.is_ok()).count(),
            1,
            "round {round}: {outcomes:?}"
        );
        assert!(outcomes.contains(&Err(UserChangeRefusal::LastAdmin)));
        let enabled_admins = store
            .list_users(100)
            .await
            .unwrap()
            .into_iter()
            .filter(|u| u.role == Role::Admin && !u.is_disabled())
            .count();
        assert_eq!(enabled_admins, 1, "round {round}");
    }
    store.close().await;
}

/// The audit row is written in the change's own transaction: when it cannot be
/// written, nothing of the change is kept (users, roles, tokens alike).
async fn an_account_change_whose_audit_row_fails_changes_nothing(db: &TestDb) {
    let store = db.store().await;
    let _root = add(&store, "root", Role::Admin).await;
    let ada = add(&store, "ada", Role::Operator).await;
    let token = store
        .create_token(
            "ci",
            Role::Reader,
            "hash-ci",
            &audit("reader token", "create_token"),
        )
        .await
        .unwrap();
    InsertFault {
        name: "account_audit_fault",
        table: "outbox_audit",
    }
    .install(&store)
    .await;

    let refused = store
        .create_user(
            NewUser {
                username: "bea".into(),
                password_hash: "h".into(),
                role: Role::Reader,
            },
            &audit("user bea", "add_user"),
        )
        .await;
    assert!(refused.is_err(), "the audit fault reached the caller");
    assert!(store.user_by_name("bea").await.unwrap().is_none());
    for change in [
        UserChange::Role(Role::Admin),
        UserChange::Disabled(true),
        UserChange::Password("other".into()),
    ] {
        let refused = store
            .change_user(&ada.id, &change, &audit("user ada", "change"))
            .await;
        assert!(refused.is_err(), "{change:?}");
    }
    let kept = store.user_by_id(&ada.id).await.unwrap().unwrap();
    assert_eq!(
        (
            kept.role,
            kept.is_disabled(),
            kept.password_hash.as_str(),
            kept.session_epoch
        ),
        (Role::Operator, false, "hash-of-ada", 0)
    );
    assert!(store
        .create_token(
            "deploy",
            Role::Admin,
            "hash-deploy",
            &audit("admin token", "create_token")
        )
        .await
        .is_err());
    assert!(store
        .revoke_token(&token.id, &audit("token", "revoke_token"))
        .await
        .is_err());
    let tokens = store.list_tokens(10).await.unwrap();
    assert_eq!(tokens.len(), 1, "no token was made");
    assert!(tokens[0].revoked_at_ms.is_none(), "nor revoked");
    assert!(store.token_by_hash("hash-ci").await.unwrap().is_some());
    store.close().await;
}

async fn revoked_tokens_authenticate_nothing_and_stay_listed(db: &TestDb) {
    let store = db.store().await;
    let token = store
        .create_token(
            "deploy",
            Role::Operator,
            "hash-1",
            &audit("operator token", "create_token"),
        )
        .await
        .unwrap();
    assert!(store.token_by_hash("hash-1").await.unwrap().is_some());
    let revoked = store
        .revoke_token(&token.id, &audit("token", "revoke_token"))
        .await
        .unwrap()
        .expect("found");
    assert!(revoked.revoked_at_ms.is_some());
    assert!(store.token_by_hash("hash-1").await.unwrap().is_none());
    // Revoking again changes nothing and writes no second row.
    store
        .revoke_token(&token.id, &audit("token", "revoke_token"))
        .await
        .unwrap();
    assert!(store
        .revoke_token("no-such-token", &audit("token", "revoke_token"))
        .await
        .unwrap()
        .is_none());
    let listed = store.list_tokens(10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].revoked_at_ms.is_some());
    assert_eq!(listed[0].created_by.as_deref(), Some("test-admin"));
    assert_eq!(
        audited(&store, "create_token").await,
        vec![(
            format!("operator token deploy ({})", token.id),
            "new".to_string()
        )]
    );
    assert_eq!(
        audited(&store, "revoke_token").await,
        vec![(format!("token deploy ({})", token.id), "new".to_string())]
    );
    store.close().await;
}

/// An account service as a node builds it, over its own connections to `db`.
async fn node(db: &TestDb, token_cache_ttl: Duration) -> (SqlStore, AccountService) {
    let store = db.store().await;
    let shared = Arc::new(store.clone());
    let service = AccountService::new(
        shared.clone(),
        shared,
        LoginThrottle::new(5, Duration::from_secs(60), Duration::from_secs(5)),
        TokenCache::new(token_cache_ttl),
    );
    (store, service)
}

async fn a_token_revoked_on_another_node_is_refused_there_once_its_cache_entry_expires(
    db: &TestDb,
) {
    let ttl = Duration::from_secs(3);
    let (store_a, node_a) = node(db, ttl).await;
    let (store_b, node_b) = node(db, ttl).await;
    let (store_c, uncached) = node(db, Duration::ZERO).await;
    let created = node_a
        .create_token(Actor::Local, "deploy", Role::Operator)
        .await
        .unwrap();
    let secret = created.secret.as_str();
    let found_on_a = Instant::now();
    for node in [&node_a, &node_b, &uncached] {
        let viewer = node.viewer_for_token(secret).await.unwrap();
        assert_eq!(viewer.map(|v| v.role), Some(Role::Operator));
    }
    let admin = Viewer {
        name: "test-admin".into(),
        role: Role::Admin,
    };
    node_b
        .revoke_token(Some(&admin), &created.token.id)
        .await
        .unwrap();
    // The node that revoked it, and a node that keeps nothing: refused at once.
    assert_eq!(node_b.viewer_for_token(secret).await.unwrap(), None);
    assert_eq!(uncached.viewer_for_token(secret).await.unwrap(), None);
    // The node that found it valid trusts its entry, and no longer than the ttl.
    let served = node_a.viewer_for_token(secret).await.unwrap();
    assert!(
        found_on_a.elapsed() < ttl,
        "precondition: node a asked again within its ttl"
    );
    assert!(served.is_some(), "node a answers from its cache");
    while node_a.viewer_for_token(secret).await.unwrap().is_some() {
        assert!(
            found_on_a.elapsed() < ttl + Duration::from_secs(5),
            "node a still accepts a token revoked {:?} ago",
            found_on_a.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(found_on_a.elapsed() >= ttl);
    for store in [store_a, store_b, store_c] {
        store.close().await;
    }
}
