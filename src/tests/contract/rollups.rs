//! The overview's rollups (issue 23, item 1): a pass sums the minutes into
//! quarter hours, the day's bars, in the transaction that writes the minutes, so
//! a day read as quarters says what the same day read as minutes says.

use herald::store::ports::DeliveryReads;
use herald::store::rollups::{
    floor_to, DeliveryMinute, DeliveryRollups, RollupGrain, ALL, DESTINATIONS_A_MINUTE, KEEP_MS,
    MINUTE_MS, OTHER_DESTINATIONS, QUARTER_MS,
};
use herald::store::SqlStore;
use sqlx::Executor;
use testkit::TestDb;

testkit::contract_tests!(
    quarter_hours_say_what_their_minutes_say,
    a_quarter_mark_behind_the_minutes_sums_the_gap_again,
);

/// Distinct failing destinations spread over one quarter: more than a minute
/// (or a quarter) keeps apart.
const FAILING: usize = DESTINATIONS_A_MINUTE + 5;

/// Two hours back, quarter-aligned: final, and well inside what is kept.
fn seeded_quarter() -> i64 {
    floor_to(herald::clock::local_now_ms(), QUARTER_MS) - 8 * QUARTER_MS
}

async fn exec(store: &SqlStore, sql: &str) {
    store.pool().execute(sql).await.unwrap();
}

/// One quarter of minutes as a busy store writes them (completed with latency
/// buckets, failures at many destinations, a backlog sample each minute), the
/// minutes' mark at the current minute and no quarters summed yet (a store that
/// just gained the quarters).
async fn seed_quarter(store: &SqlStore, quarter: i64) {
    for i in 0..15i64 {
        let minute = quarter + i * MINUTE_MS;
        exec(
            store,
            &format!(
                "INSERT INTO delivery_minutes \
                 (minute, source, kind, status, destination, deliveries, latency, oldest_at) VALUES \
                 ({minute}, 'jobs', 'callback', 'completed', '', {n}, '{n},1,0,0,0,0,0,0,0,0,0,0,0,0,0,0', NULL), \
                 ({minute}, '', '', 'pending', '', {backlog}, NULL, {oldest})",
                n = 10 + i,
                backlog = 40 + (i * 7) % 50,
                oldest = minute - 1_000 * (i + 1),
            ),
        )
        .await;
        // Each minute fails at a few destinations; over the quarter, FAILING.
        for d in 0..3usize {
            let destination = format!("https://t{:02}.example", (i as usize * 3 + d) % FAILING);
            exec(
                store,
                &format!(
                    "INSERT INTO delivery_minutes \
                     (minute, source, kind, status, destination, deliveries, latency, oldest_at) \
                     VALUES ({minute}, 'jobs', 'callback', 'failed', '{destination}', {n}, NULL, NULL)",
                    n = d + 1,
                ),
            )
            .await;
        }
    }
    let now = herald::clock::local_now_ms();
    exec(
        store,
        &format!(
            "UPDATE delivery_rollup_state SET final_before = {}, quarters_before = NULL WHERE id = 1",
            now - now.rem_euclid(MINUTE_MS)
        ),
    )
    .await;
}

fn of(rows: &[DeliveryMinute], quarter: i64, status: &str) -> Vec<DeliveryMinute> {
    rows.iter()
        .filter(|r| floor_to(r.minute, QUARTER_MS) == quarter && r.status == status)
        .cloned()
        .collect()
}

fn total(rows: &[DeliveryMinute]) -> i64 {
    rows.iter().map(|r| r.deliveries).sum()
}

async fn both_grains(store: &SqlStore, since: i64) -> (Vec<DeliveryMinute>, Vec<DeliveryMinute>) {
    let (quarters, _) = store
        .delivery_rollups(since, RollupGrain::QuarterHours)
        .await
        .unwrap();
    let (minutes, _) = store
        .delivery_rollups(since, RollupGrain::Minutes)
        .await
        .unwrap();
    (quarters, minutes)
}

async fn quarter_hours_say_what_their_minutes_say(db: &TestDb) {
    let store = db.store().await;
    let quarter = seeded_quarter();
    seed_quarter(&store, quarter).await;
    store.roll_up(&[]).await.unwrap();

    let since = floor_to(herald::clock::local_now_ms(), QUARTER_MS) - KEEP_MS / 2;
    let (quarters, minutes) = both_grains(&store, since).await;
    let summed: Vec<&DeliveryMinute> = quarters.iter().filter(|r| r.minute == quarter).collect();
    assert!(!summed.is_empty(), "the first pass summed the quarter");
    assert!(
        quarters
            .iter()
            .filter(|r| floor_to(r.minute, QUARTER_MS) == quarter)
            .all(|r| r.minute == quarter),
        "a quarter is one row per key, at its first minute"
    );

    let completed = of(&quarters, quarter, "completed");
    assert_eq!(completed.len(), 1);
    assert_eq!(
        total(&completed),
        total(&of(&minutes, quarter, "completed"))
    );
    assert_eq!(total(&completed), (10..25).sum::<i64>());
    assert_eq!(
        completed[0].latency[..2],
        [(10..25).sum::<i64>(), 15],
        "latency buckets add up"
    );

    let failed = of(&quarters, quarter, "failed");
    assert_eq!(
        total(&failed),
        total(&of(&minutes, quarter, "failed")),
        "no failure lost"
    );
    assert_eq!(total(&failed), 15 * (1 + 2 + 3));
    assert_eq!(
        failed.len(),
        DESTINATIONS_A_MINUTE + 1,
        "{FAILING} destinations fold into {DESTINATIONS_A_MINUTE} and the rest"
    );
    assert_eq!(
        failed
            .iter()
            .filter(|r| r.destination == OTHER_DESTINATIONS)
            .count(),
        1
    );

    let backlog = of(&quarters, quarter, "pending");
    assert_eq!(backlog.len(), 1);
    assert_eq!(backlog[0].source, ALL);
    let sampled = of(&minutes, quarter, "pending");
    assert_eq!(
        backlog[0].deliveries,
        sampled.iter().map(|r| r.deliveries).max().unwrap(),
        "a quarter's backlog is its peak"
    );
    assert_eq!(
        backlog[0].oldest_at,
        sampled.iter().filter_map(|r| r.oldest_at).min(),
        "and the oldest commit any minute saw"
    );

    // A second pass changes nothing: the quarter is final.
    store.roll_up(&[]).await.unwrap();
    let (again, _) = both_grains(&store, since).await;
    assert_eq!(of(&again, quarter, "failed"), failed);
    assert_eq!(of(&again, quarter, "completed"), completed);
}

async fn a_quarter_mark_behind_the_minutes_sums_the_gap_again(db: &TestDb) {
    let store = db.store().await;
    let quarter = seeded_quarter();
    seed_quarter(&store, quarter).await;
    store.roll_up(&[]).await.unwrap();
    let since = quarter - QUARTER_MS;
    let (before, _) = both_grains(&store, since).await;
    assert_eq!(
        total(&of(&before, quarter, "completed")),
        (10..25).sum::<i64>()
    );

    // An older release (no quarters) recounted a minute of the quarter and moved
    // only the minutes' mark on; the quarters' mark is where this release left it.
    exec(
        &store,
        &format!(
            "UPDATE delivery_minutes SET deliveries = deliveries + 100 \
             WHERE minute = {} AND status = 'completed'",
            quarter + 3 * MINUTE_MS
        ),
    )
    .await;
    exec(
        &store,
        &format!("UPDATE delivery_rollup_state SET quarters_before = {quarter} WHERE id = 1"),
    )
    .await;
    store.roll_up(&[]).await.unwrap();
    let (after, minutes) = both_grains(&store, since).await;
    assert_eq!(
        total(&of(&after, quarter, "completed")),
        (10..25).sum::<i64>() + 100,
        "the quarter behind the mark was summed again"
    );
    assert_eq!(
        total(&of(&after, quarter, "completed")),
        total(&of(&minutes, quarter, "completed"))
    );
}
