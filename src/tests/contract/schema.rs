//! The schema: migrations apply on every engine, twice without harm, and leave
//! the store ready.

use testkit::TestDb;

testkit::contract_tests!(migrations_are_idempotent_and_make_the_store_ready,);

async fn migrations_are_idempotent_and_make_the_store_ready(db: &TestDb) {
    let store = db.store().await;
    assert!(store.is_ready().await);
    store.migrate().await.expect("second migrate is a no-op");
    assert!(store.is_ready().await);
    store.close().await;
}
