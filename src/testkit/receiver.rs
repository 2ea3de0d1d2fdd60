//! A real HTTP receiver on loopback that records, holds, scripts and verifies
//! the webhooks Herald sends it.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;

/// One request a [`Receiver`] got.
#[derive(Clone, Debug)]
pub struct Arrival {
    pub path: String,
    pub event_id: String,
    pub body: serde_json::Value,
    /// Whether a Standard Webhooks verifier accepted it (None: no secret to check with).
    pub verified: Option<bool>,
    /// Its W3C `traceparent` header, if it carried one.
    pub traceparent: Option<String>,
    /// When it arrived (rates in `benches/isolation.rs`).
    #[allow(dead_code)]
    pub at: std::time::Instant,
}

/// A real HTTP receiver on loopback that records every request it is sent, answers
/// from a script (then a default status), and verifies Standard Webhooks signatures
/// with the reference library.
pub struct Receiver {
    pub addr: SocketAddr,
    state: std::sync::Arc<ReceiverState>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
pub struct ReceiverState {
    arrivals: std::sync::Mutex<Vec<Arrival>>,
    answered: std::sync::Mutex<Vec<String>>,
    hold: std::sync::Mutex<std::time::Duration>,
    gate: Gate,
    /// Requests arrived and not yet answered, and the most there ever were at once.
    in_flight: std::sync::Mutex<(usize, usize)>,
    status: std::sync::atomic::AtomicU16,
    /// Answers to give first: (status, Retry-After).
    script: std::sync::Mutex<std::collections::VecDeque<(u16, Option<String>)>>,
    secrets: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

impl Receiver {
    pub async fn start() -> Receiver {
        use axum::routing::post;
        let state = std::sync::Arc::new(ReceiverState::default());
        state.status.store(200, std::sync::atomic::Ordering::SeqCst);
        let shared = state.clone();
        let app = axum::Router::new().route(
            "/{*path}",
            post(
                move |uri: axum::http::Uri,
                      headers: axum::http::HeaderMap,
                      body: axum::body::Bytes| {
                    let state = shared.clone();
                    async move { state.receive(uri.path().to_string(), headers, body).await }
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { addr, state, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    pub fn url_for(&self, path: &str) -> String {
        format!("http://{}/{path}", self.addr)
    }

    pub fn set_hold(&self, hold: std::time::Duration) {
        *self.state.hold.lock().unwrap() = hold;
    }

    /// Holds every request (arrived, recorded, unanswered) until [`Receiver::resume`]:
    /// a sender's requests in flight stay in flight, whatever the machine's speed.
    pub fn pause(&self) {
        self.state.gate.state.send_modify(|gate| gate.closed = true);
    }

    pub fn resume(&self) {
        self.state
            .gate
            .state
            .send_modify(|gate| gate.closed = false);
    }

    /// Answers the requests held at the paused gate now; requests that arrive
    /// later are still held until [`Receiver::resume`].
    pub fn release_held(&self) {
        let last = self
            .state
            .gate
            .tickets
            .load(std::sync::atomic::Ordering::SeqCst);
        self.state
            .gate
            .state
            .send_modify(|gate| gate.released = last);
    }

    /// The most requests this receiver held unanswered at once (since the last
    /// [`Receiver::reset_max_in_flight`]).
    pub fn max_in_flight(&self) -> usize {
        self.state.in_flight.lock().unwrap().1
    }

    /// Starts counting the most requests held at once from those held now.
    pub fn reset_max_in_flight(&self) {
        let mut in_flight = self.state.in_flight.lock().unwrap();
        in_flight.1 = in_flight.0;
    }

    /// The event ids of the requests held at the paused gate now.
    pub fn held_at_gate(&self) -> HashSet<String> {
        self.state.gate.held.lock().unwrap().clone()
    }

    pub fn set_status(&self, status: u16) {
        self.state
            .status
            .store(status, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn script(&self, answers: &[(u16, Option<&str>)]) {
        let mut script = self.state.script.lock().unwrap();
        for (status, retry_after) in answers {
            script.push_back((*status, retry_after.map(str::to_string)));
        }
    }

    /// Verify requests to `/path` with this `whsec_` secret.
    pub fn verify_with(&self, path: &str, secret: &str) {
        self.state
            .secrets
            .lock()
            .unwrap()
            .insert(format!("/{path}"), secret.to_string());
    }

    /// How many requests arrived (cheap enough to poll).
    pub fn count(&self) -> usize {
        self.state.arrivals.lock().unwrap().len()
    }

    pub fn requests(&self) -> Vec<Arrival> {
        self.state.arrivals.lock().unwrap().clone()
    }

    pub fn arrivals(&self) -> Vec<String> {
        self.requests().into_iter().map(|a| a.event_id).collect()
    }

    /// How many times each event id arrived.
    pub fn arrivals_per_event(&self) -> HashMap<String, usize> {
        let mut seen = HashMap::new();
        for id in self.arrivals() {
            *seen.entry(id).or_default() += 1;
        }
        seen
    }

    pub fn answered(&self) -> Vec<String> {
        self.state.answered.lock().unwrap().clone()
    }

    pub fn stop(self) {
        self.task.abort();
    }
}

impl ReceiverState {
    async fn receive(
        &self,
        path: String,
        headers: axum::http::HeaderMap,
        body: axum::body::Bytes,
    ) -> axum::response::Response {
        use axum::response::IntoResponse;
        let event_id = headers
            .get("x-herald-event-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        if !event_id.is_empty() {
            assert_eq!(
                json["notification_event_id"],
                event_id.as_str(),
                "body and header agree"
            );
        }
        let secret = self.secrets.lock().unwrap().get(&path).cloned();
        let verified = secret.map(|secret| {
            standardwebhooks::Webhook::new(&secret)
                .unwrap()
                .verify(&body, &headers)
                .is_ok()
        });
        self.arrivals.lock().unwrap().push(Arrival {
            path,
            event_id: event_id.clone(),
            body: json,
            verified,
            traceparent: headers
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
            at: std::time::Instant::now(),
        });
        let _unanswered = InFlight::enter(&self.in_flight);
        let hold = *self.hold.lock().unwrap();
        tokio::time::sleep(hold).await;
        self.gate.pass(&event_id).await;
        let (status, retry_after) = self
            .script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or((self.status.load(std::sync::atomic::Ordering::SeqCst), None));
        self.answered.lock().unwrap().push(event_id);
        let status = axum::http::StatusCode::from_u16(status).unwrap();
        match retry_after {
            Some(value) => (status, [("retry-after", value)]).into_response(),
            None => status.into_response(),
        }
    }
}

/// One request counted in flight until it is answered or its sender gives up
/// (the handler is dropped with the connection).
struct InFlight<'a>(&'a std::sync::Mutex<(usize, usize)>);

impl<'a> InFlight<'a> {
    fn enter(count: &'a std::sync::Mutex<(usize, usize)>) -> InFlight<'a> {
        let mut now = count.lock().unwrap();
        now.0 += 1;
        now.1 = now.1.max(now.0);
        InFlight(count)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.lock().unwrap().0 -= 1;
    }
}

/// Where a paused [`Receiver`] holds requests.
struct Gate {
    state: tokio::sync::watch::Sender<GateState>,
    /// The ticket of the last request held (each held request takes the next).
    tickets: std::sync::atomic::AtomicU64,
    held: std::sync::Mutex<HashSet<String>>,
}

#[derive(Clone, Copy, Default)]
struct GateState {
    closed: bool,
    /// Held requests with a ticket up to this one are let through.
    released: u64,
}

impl Default for Gate {
    fn default() -> Gate {
        Gate {
            state: tokio::sync::watch::channel(GateState::default()).0,
            tickets: Default::default(),
            held: Default::default(),
        }
    }
}

impl Gate {
    async fn pass(&self, event_id: &str) {
        let mut state = self.state.subscribe();
        if !state.borrow_and_update().closed {
            return;
        }
        let ticket = self
            .tickets
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        self.held.lock().unwrap().insert(event_id.to_string());
        // Let go of it however the wait ends (the sender may give up first).
        let _release = HeldAtGate(&self.held, event_id);
        let _ = state
            .wait_for(|gate| !gate.closed || gate.released >= ticket)
            .await;
    }
}

/// An event id in a gate's held set, removed when dropped.
struct HeldAtGate<'a>(&'a std::sync::Mutex<HashSet<String>>, &'a str);

impl Drop for HeldAtGate<'_> {
    fn drop(&mut self) {
        self.0.lock().unwrap().remove(self.1);
    }
}
