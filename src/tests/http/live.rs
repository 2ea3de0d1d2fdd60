//! The console's live-update stream (issue 23, item 5), read as the browser
//! reads it: a signed-in tab gets a `ready` event, then a `change` notice when a
//! run is recorded and when its delivery settles (notices, never data); a
//! signed-out one is refused; a server at `live_max_streams` answers 503 (the tab
//! polls) and takes a new stream once one closes.

use std::time::Duration;

use reqwest::StatusCode;
use testkit::{create_run_via_api, TestServer};
use vocab::Role;

/// An open stream: its body, read event by event.
struct Stream {
    body: reqwest::Response,
    text: String,
}

impl Stream {
    async fn open(server: &TestServer, browser: &reqwest::Client) -> Result<Stream, StatusCode> {
        let resp = browser
            .get(server.url("/console-api/live"))
            .send()
            .await
            .unwrap();
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
async fn a_tab_is_told_of_changes_and_a_full_server_refuses_more_tabs() {
    let server = TestServer::start_with(|args| args.live_max_streams = Some(2)).await;
    let operator = server.token(Role::Operator).await;
    let reader = server.session(Role::Reader).await;

    let signed_out = server.browser();
    assert_eq!(
        Stream::open(&server, &signed_out).await.err(),
        Some(StatusCode::UNAUTHORIZED)
    );

    let mut tab = Stream::open(&server, &reader).await.expect("a stream");
    let (event, _) = tab
        .next_event(Duration::from_secs(10))
        .await
        .expect("ready");
    assert_eq!(event, "ready");
    // Other tests of this process write too (the feed is the process's): what
    // this one asserts is that a notice comes after its own change, carrying no data.
    create_run_via_api(&reqwest::Client::new(), &server.url(""), &operator, None).await;
    let (event, data) = tab
        .next_event(Duration::from_secs(10))
        .await
        .expect("a notice after the run was recorded");
    assert_eq!((event.as_str(), data.as_str()), ("change", "{}"));

    // Two places: a third tab is refused and polls; a place freed is taken again.
    let second = Stream::open(&server, &reader)
        .await
        .expect("a second stream");
    let refused = reader
        .get(server.url("/console-api/live"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body = refused.text().await.unwrap();
    assert!(body.contains("live_max_streams"), "{body}");
    drop(second);
    let mut reopened = None;
    for _ in 0..50 {
        match Stream::open(&server, &reader).await {
            Ok(stream) => {
                reopened = Some(stream);
                break;
            }
            Err(status) => assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reopened.is_some(), "a closed tab's place is given back");
    server.stop().await;
}
