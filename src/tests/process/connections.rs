//! A flood of client connections against a real `herald serve` with a small
//! open-file limit: Herald holds a bounded number of them, so the store and the
//! deliveries keep the descriptors they need and committed work goes out; and
//! connections left idle give their places back.

use std::time::Duration;

use herald::outbox::model::NewEvent;
use testkit::{
    all_completed, callback, enqueue, parented, wait_for, worker_flags, HeraldProcess, Receiver,
    TestDb,
};

const PARENT: &str = "connection-flood";
/// Herald's open-file limit in this scene (soft and hard).
const OPEN_FILES: u64 = 512;
/// Client connections opened and held: more than Herald could ever hold.
const FLOOD: usize = 600;

/// Sockets `pid` holds open (client connections, listeners, outbound).
fn open_sockets(pid: u32) -> usize {
    open_descriptors(pid, |target| target.starts_with("socket:"))
}

fn open_descriptors(pid: u32, keep: impl Fn(&str) -> bool) -> usize {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|entry| std::fs::read_link(entry.path()).is_ok_and(|t| keep(&t.to_string_lossy())))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_of_client_connections_leaves_the_deliveries_their_descriptors() {
    let db = TestDb::new(herald::store::Engine::Sqlite).await;
    let store = db.store().await;
    let receiver = Receiver::start().await;
    let mut herald =
        HeraldProcess::spawn_with_open_file_limit(&db.url, &worker_flags("5"), &[], OPEN_FILES);
    let base = herald.ready().await;
    let pid = herald.child.id();
    let addr = base.trim_start_matches("http://").to_string();

    // Arrange the flood and check it took what Herald lets it take. Past what
    // Herald holds and its listen backlog, a connection is never answered: 2 s
    // is two SYN retransmissions on loopback.
    let attempts = (0..FLOOD).map(|_| {
        tokio::time::timeout(
            Duration::from_secs(2),
            tokio::net::TcpStream::connect(addr.clone()),
        )
    });
    let flood: Vec<tokio::net::TcpStream> = futures_util::future::join_all(attempts)
        .await
        .into_iter()
        .filter_map(|connected| connected.ok()?.ok())
        .collect();
    assert!(flood.len() >= 200, "only {} connections made", flood.len());
    wait_for(
        "Herald holding flooded connections",
        Duration::from_secs(10),
        async || open_sockets(pid) >= 100,
    )
    .await;

    // Work committed while the flood holds must still go out: every delivery
    // needs a socket, every settle the store's files.
    let events: Vec<NewEvent> = (0..20)
        .map(|i| parented(callback(&format!("flood-{i}"), &receiver.url()), PARENT))
        .collect();
    enqueue(&store, &events).await;
    wait_for(
        "every event delivered and completed under the flood",
        Duration::from_secs(30),
        async || all_completed(&store, PARENT).await && receiver.arrivals().len() >= 20,
    )
    .await;
    let held = open_descriptors(pid, |_| true);
    assert!(
        held < OPEN_FILES as usize - 100,
        "Herald holds {held} descriptors of its {OPEN_FILES}: the flood took what the store and the deliveries need"
    );
    let log = std::fs::read_to_string(&herald.log).unwrap_or_default();
    assert!(
        !log.contains("Too many open files") && !log.contains("unable to open database file"),
        "Herald ran out of descriptors:\n{log}"
    );
    assert!(
        log.contains("every client connection place is taken"),
        "the full listener is reported"
    );

    // Once the flood goes, a new client is served.
    drop(flood);
    let answered = reqwest::Client::new()
        .get(format!("{base}/readyz"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map(|r| r.status().is_success());
    assert!(
        matches!(answered, Ok(true)),
        "a new client after the flood: {answered:?}"
    );
    // The gauges: the bound inside the limit, and the flood's places freed.
    let max = testkit::metric_value(&base, "herald_http_connections_max").await;
    assert!(
        max.is_some_and(|max| max >= 64.0 && max < OPEN_FILES as f64),
        "herald_http_connections_max {max:?}"
    );
    wait_for(
        "the flood's connections no longer counted",
        Duration::from_secs(10),
        async || {
            testkit::metric_value(&base, "herald_http_connections_open")
                .await
                .is_some_and(|open| open < 10.0)
        },
    )
    .await;
    drop(herald);
    receiver.stop();
    store.close().await;
    db.drop_db().await;
}

/// `herald_http_connections_open`, read on a connection that is closed at once.
async fn open_connections(base: &str) -> i64 {
    testkit::metric_value(base, "herald_http_connections_open")
        .await
        .map_or(-1, |open| open as i64)
}

/// Clients that open connections and leave them take every place
/// (`--http-max-connections 3`); with `--http-idle-timeout-secs 1` each is
/// closed once nothing has passed on it for a second, and a client that waited
/// behind them is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connections_left_idle_give_their_places_back() {
    let db = TestDb::new(herald::store::Engine::Sqlite).await;
    let mut herald = HeraldProcess::spawn(
        &db.url,
        &[
            "--http-max-connections",
            "3",
            "--http-idle-timeout-secs",
            "1",
        ],
    );
    let base = herald.ready().await;
    let addr = base.trim_start_matches("http://").to_string();
    wait_for(
        "no connection left open but the metrics read's own",
        Duration::from_secs(10),
        async || open_connections(&base).await == 1,
    )
    .await;
    let mut idle = Vec::new();
    for _ in 0..2 {
        idle.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    // Arranged: the two idle connections and this read hold the three places
    // (the readiness probe's connection is gone).
    wait_for(
        "the two idle connections and a metrics read holding the three places",
        Duration::from_secs(10),
        async || open_connections(&base).await == 3,
    )
    .await;
    idle.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    let asked = std::time::Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(15),
        reqwest::Client::new().get(format!("{base}/healthz")).send(),
    )
    .await
    .expect("a waiting client is served once idle connections are closed")
    .unwrap();
    assert!(answer.status().is_success());
    assert!(
        asked.elapsed() >= Duration::from_millis(500),
        "served after {:?}: a place was free, the scene was not arranged",
        asked.elapsed()
    );
    for mut connection in idle {
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(
            Duration::from_secs(10),
            tokio::io::AsyncReadExt::read(&mut connection, &mut byte),
        )
        .await
        .expect("an idle connection is closed");
        assert!(!matches!(read, Ok(n) if n > 0), "{read:?}");
    }
    let closed = testkit::metric_value(&base, "herald_http_connections_closed_idle_total").await;
    assert!(closed.is_some_and(|closed| closed >= 3.0), "{closed:?}");
    herald.sigterm();
}
