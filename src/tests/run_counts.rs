//! The Runs page's status chip counts, on SQLite, PostgreSQL and MariaDB: one capped
//! count per status, so a million runs cost no more than the cap.

use herald::store::ports::{NewRun, RunRepository};
use sqlx::Executor;
use vocab::RunStatus;

use crate::support::TestDb;

crate::contract_tests!(status_counts_are_exact_below_the_cap_and_stop_just_above_it);

async fn status_counts_are_exact_below_the_cap_and_stop_just_above_it(db: &TestDb) {
    let store = db.store().await;
    for _ in 0..7 {
        store
            .create_run(NewRun {
                run_type: "etl".into(),
                tenant: "acme".into(),
                callback_url: None,
                routes: Vec::new(),
            })
            .await
            .unwrap();
    }
    // Two of the seven failed.
    store
        .pool()
        .execute(
            "UPDATE runs SET status = 'failed' WHERE id IN \
             (SELECT id FROM (SELECT id FROM runs ORDER BY id LIMIT 2) two)",
        )
        .await
        .unwrap();
    let count = |counts: &[(RunStatus, i64)], status| {
        counts
            .iter()
            .find(|(s, _)| *s == status)
            .map(|(_, n)| *n)
            .unwrap()
    };
    let exact = store.count_by_status(100).await.unwrap();
    assert_eq!(exact.len(), RunStatus::ALL.len(), "every status is counted");
    assert_eq!(count(&exact, RunStatus::Queued), 5);
    assert_eq!(count(&exact, RunStatus::Failed), 2);
    assert_eq!(count(&exact, RunStatus::Succeeded), 0);
    // Capped at 3: five queued count as 4 ("3+"), two failed stay exact.
    let capped = store.count_by_status(3).await.unwrap();
    assert_eq!(count(&capped, RunStatus::Queued), 4);
    assert_eq!(count(&capped, RunStatus::Failed), 2);
    store.close().await;
}
