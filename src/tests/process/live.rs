//! The console's live-update stream (issue 23, item 5) from a real `herald serve`
//! of the test's own (the change feed is a process's: this one's changes are only
//! the test's), read as a browser reads it: signed out is refused; a tab gets
//! `ready`, nothing while nothing changes, then a `change` notice (no data) when a
//! run is recorded; a server at `live_max_streams` answers 503 (the tab polls)
//! and takes a new stream once one closes; SIGTERM ends the open streams, so the
//! server stops promptly instead of waiting out their ten minutes. A quiet
//! stream writes keep-alives often enough not to be closed as an idle
//! connection (`http_idle_timeout_secs`).

use std::time::Duration;

use herald::store::Engine;
use reqwest::StatusCode;
use testkit::{api_token, create_run_via_api, HeraldProcess, TestDb};
use vocab::Role;

/// An open stream: its body, read event by event.
struct Stream {
    body: reqwest::Response,
    text: String,
}

impl Stream {
    async fn open(base: &str, token: Option<&str>) -> Result<Stream, StatusCode> {
        let mut request = reqwest::Client::new().get(format!("{base}/console-api/live"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let resp = request.send().await.unwrap();
        if resp.status() != StatusCode::OK {
            return Err(resp.status());
        }
        assert_eq!(
            resp.headers()[reqwest::header::CONTENT_TYPE],
            "text/event-stream"
        );
        Ok(Stream {
            body: resp,
            text: String::new(),
        })
    }

    /// A stream opened with `token` that has said `ready`.
    async fn ready(base: &str, token: &str) -> Stream {
        let mut tab = Stream::open(base, Some(token)).await.expect("a stream");
        let (event, _) = tab
            .next_event(Duration::from_secs(10))
            .await
            .expect("ready");
        assert_eq!(event, "ready");
        tab
    }

    /// Says nothing for three seconds while nothing changes (longer than the
    /// gap between notices, and three times a one-second idle timeout), then,
    /// once `operator` records a run, a `change` notice without data.
    async fn quiet_then_hears_a_run(&mut self, base: &str, operator: &str) {
        assert_eq!(self.next_event(Duration::from_secs(3)).await, None);
        create_run_via_api(&reqwest::Client::new(), base, operator, None).await;
        let (event, data) = self
            .next_event(Duration::from_secs(10))
            .await
            .expect("a notice after the run was recorded, on a stream still open");
        assert_eq!((event.as_str(), data.as_str()), ("change", "{}"));
    }

    /// The name of the next event (keep-alive comments skipped), waiting at most
    /// `within`.
    async fn next_event(&mut self, within: Duration) -> Option<(String, String)> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(end) = self.text.find("\n\n") {
                let block: String = self.text.drain(..end + 2).collect();
                let field = |name: &str| {
                    block
                        .lines()
                        .find_map(|l| l.strip_prefix(name))
                        .map(|v| v.trim().to_string())
                };
                if let Some(event) = field("event:") {
                    return Some((event, field("data:").unwrap_or_default()));
                }
                continue;
            }
            match tokio::time::timeout_at(deadline, self.body.chunk()).await {
                Ok(Ok(Some(chunk))) => self.text.push_str(&String::from_utf8_lossy(&chunk)),
                _ => return None,
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tab_hears_of_changes_a_full_server_refuses_more_and_sigterm_ends_the_streams() {
    let db = TestDb::new(Engine::Sqlite).await;
    let token = api_token(&db.url, Role::Reader).await;
    let operator = api_token(&db.url, Role::Operator).await;
    let mut herald = HeraldProcess::spawn(&db.url, &["--live-max-streams", "2"]);
    let base = herald.ready().await;

    assert_eq!(
        Stream::open(&base, None).await.err(),
        Some(StatusCode::UNAUTHORIZED)
    );
    let mut tab = Stream::ready(&base, &token).await;
    tab.quiet_then_hears_a_run(&base, &operator).await;

    // Two places: a third tab is refused and polls; a place freed is taken again.
    let second = Stream::open(&base, Some(&token))
        .await
        .expect("a second stream");
    let refused = reqwest::Client::new()
        .get(format!("{base}/console-api/live"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body = refused.text().await.unwrap();
    assert!(body.contains("live_max_streams"), "{body}");
    drop(second);
    let mut reopened = None;
    for _ in 0..50 {
        match Stream::open(&base, Some(&token)).await {
            Ok(stream) => {
                reopened = Some(stream);
                break;
            }
            Err(status) => assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut reopened = reopened.expect("a closed tab's place is given back");

    // SIGTERM: the open streams end and the server exits well within their lifetime.
    herald.sigterm();
    assert!(
        herald.exited_within(Duration::from_secs(20)).is_some(),
        "a graceful stop does not wait on live streams"
    );
    let _ = reopened.next_event(Duration::from_secs(5)).await;
    assert_eq!(reopened.next_event(Duration::from_secs(5)).await, None);
}

/// With `--http-idle-timeout-secs 1`, a stream on which nothing happens for
/// three seconds is still open (its keep-alives come at a third of the idle
/// timeout, not every 15 s) and hears the next change.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_quiet_stream_outlives_the_idle_timeout() {
    let db = TestDb::new(Engine::Sqlite).await;
    let token = api_token(&db.url, Role::Reader).await;
    let operator = api_token(&db.url, Role::Operator).await;
    let mut herald = HeraldProcess::spawn(&db.url, &["--http-idle-timeout-secs", "1"]);
    let base = herald.ready().await;
    let mut tab = Stream::ready(&base, &token).await;
    tab.quiet_then_hears_a_run(&base, &operator).await;
}
