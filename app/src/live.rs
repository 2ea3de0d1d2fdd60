//! Live updates (issue 23, item 5): one EventSource per visible tab on
//! `/console-api/live` (a hidden tab closes it: browsers give a host six
//! HTTP/1.1 connections, and a stream holds one). Each change notice refreshes
//! the parts of the page that asked for it ([`poll_while_visible`]) while the
//! tab is visible and the viewer has not paused; a notice a part could not take
//! then is taken as soon as it can. While the stream is down (the server is full
//! and answered 503, or it restarts) parts poll every two seconds instead, and
//! while it is up a slow poll catches what other nodes changed. Imports no page.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use leptos::prelude::*;

/// Where the server's change notices stream from.
const LIVE_PATH: &str = "/console-api/live";
/// How often a part polls while the stream is down.
const POLL: Duration = Duration::from_secs(2);
/// While streaming, every this many polls one refreshes anyway (other nodes'
/// changes are not on this server's stream): every 30 seconds.
const POLLS_PER_SAFETY_REFRESH: u32 = 15;
/// How long a tab refused a stream (503) waits before asking again.
const RETRY_REFUSED: Duration = Duration::from_secs(30);

/// How the tab learns of changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LiveState {
    Connecting,
    Streaming,
    /// The stream is down or refused: parts poll.
    Polling,
}

impl LiveState {
    pub fn as_str(self) -> &'static str {
        match self {
            LiveState::Connecting => "connecting",
            LiveState::Streaming => "streaming",
            LiveState::Polling => "polling",
        }
    }
}

/// The tab's live updates: its state, the viewer's pause, and a count of the
/// notices received (parts refresh when it moves).
#[derive(Clone, Copy)]
pub struct Live {
    pub state: RwSignal<LiveState>,
    pub paused: RwSignal<bool>,
    notices: RwSignal<u64>,
}

impl Live {
    /// The tab's live updates, opened in the browser once the app runs, closed
    /// while the tab is hidden.
    pub fn start() -> Live {
        let live = Live {
            state: RwSignal::new(LiveState::Connecting),
            paused: RwSignal::new(false),
            notices: RwSignal::new(0),
        };
        Effect::new(move |_| {
            use wasm_bindgen::closure::Closure;
            use wasm_bindgen::JsCast;

            connect(live);
            let shown = Closure::<dyn FnMut(web_sys::Event)>::new(move |_| {
                if document().hidden() {
                    disconnect();
                    live.state.set(LiveState::Polling);
                } else {
                    connect(live);
                }
            });
            let _ = document().add_event_listener_with_callback(
                "visibilitychange",
                shown.as_ref().unchecked_ref(),
            );
            // The app lives as long as the tab: so does its listener.
            shown.forget();
        });
        live
    }

    /// How many notices the tab has received (shown to tests in the top bar).
    pub fn notices(self) -> u64 {
        self.notices.get()
    }
}

/// The open stream and its handlers: replaced (the old one closed) on reconnect.
struct Stream {
    source: web_sys::EventSource,
    _handlers: [wasm_bindgen::closure::Closure<dyn FnMut(web_sys::Event)>; 3],
}

thread_local! {
    static STREAM: RefCell<Option<Stream>> = const { RefCell::new(None) };
    /// Whether a stream has been open before: a later `ready` is a reconnect,
    /// and what changed while it was down is a notice.
    static OPENED_BEFORE: Cell<bool> = const { Cell::new(false) };
}

fn disconnect() {
    if let Some(stream) = STREAM.with(|s| s.borrow_mut().take()) {
        stream.source.close();
    }
}

/// Opens the stream; a refused or failed one leaves the parts polling, and a
/// refused one is asked for again later (the browser retries the others itself).
fn connect(live: Live) {
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::JsCast;

    disconnect();
    let Ok(source) = web_sys::EventSource::new(LIVE_PATH) else {
        live.state.set(LiveState::Polling);
        return;
    };
    let on_ready = Closure::<dyn FnMut(web_sys::Event)>::new(move |_| {
        live.state.set(LiveState::Streaming);
        if OPENED_BEFORE.with(|o| o.replace(true)) {
            live.notices.update(|n| *n += 1);
        }
    });
    let on_change = Closure::<dyn FnMut(web_sys::Event)>::new(move |_| {
        live.state.set(LiveState::Streaming);
        live.notices.update(|n| *n += 1);
    });
    let closed = source.clone();
    let on_error = Closure::<dyn FnMut(web_sys::Event)>::new(move |_| {
        live.state.set(LiveState::Polling);
        if closed.ready_state() == web_sys::EventSource::CLOSED && !document().hidden() {
            set_timeout(move || connect(live), RETRY_REFUSED);
        }
    });
    let _ = source.add_event_listener_with_callback("ready", on_ready.as_ref().unchecked_ref());
    let _ = source.add_event_listener_with_callback("change", on_change.as_ref().unchecked_ref());
    source.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    STREAM.with(|s| {
        *s.borrow_mut() = Some(Stream {
            source,
            _handlers: [on_ready, on_change, on_error],
        })
    });
}

/// Calls `refresh` when the server says something changed, or every two seconds
/// while the stream is down, as long as the tab is visible, `wanted()` holds and
/// the viewer has not paused; once when the viewer resumes. Runs only in the
/// browser.
pub fn poll_while_visible(wanted: impl Fn() -> bool + 'static, refresh: impl Fn() + 'static) {
    let Some(live) = use_context::<Live>() else {
        return;
    };
    let due = Rc::new(move || !document().hidden() && !live.paused.get_untracked() && wanted());
    let refresh = Rc::new(refresh);
    // A notice this part could not take yet (hidden, paused, in use): taken as
    // soon as it can be.
    let missed = Rc::new(Cell::new(false));
    let (notice_due, notice_refresh, notice_missed) =
        (due.clone(), refresh.clone(), missed.clone());
    Effect::new(move |seen: Option<u64>| {
        let count = live.notices.get();
        if seen.is_some_and(|seen| seen != count) {
            if notice_due() {
                notice_missed.set(false);
                notice_refresh();
            } else {
                notice_missed.set(true);
            }
        }
        count
    });
    // Resumed: what changed meanwhile.
    let (resume_refresh, resume_missed) = (refresh.clone(), missed.clone());
    Effect::new(move |was_paused: Option<bool>| {
        let paused = live.paused.get();
        if was_paused == Some(true) && !paused {
            resume_missed.set(false);
            resume_refresh();
        }
        paused
    });
    // The poll: every two seconds while the stream is down, now and then while
    // up, and as soon as a missed notice can be taken.
    Effect::new(move |_| {
        let (due, refresh, missed) = (due.clone(), refresh.clone(), missed.clone());
        let mut polls = 0u32;
        let tick = move || {
            polls = polls.wrapping_add(1);
            let streaming = live.state.get_untracked() == LiveState::Streaming;
            let wants =
                missed.get() || !streaming || polls.is_multiple_of(POLLS_PER_SAFETY_REFRESH);
            if wants && due() {
                missed.set(false);
                refresh();
            }
        };
        let tick = std::cell::RefCell::new(tick);
        if let Ok(handle) = set_interval_with_handle(move || (tick.borrow_mut())(), POLL) {
            on_cleanup(move || handle.clear());
        }
    });
}

/// The top bar's control: what the tab does, and a button to pause or resume.
#[component]
pub fn LiveControl() -> impl IntoView {
    let Some(live) = use_context::<Live>() else {
        return ().into_any();
    };
    let label = move || match (live.paused.get(), live.state.get()) {
        (true, _) => "Paused",
        (false, LiveState::Streaming) => "Live",
        (false, LiveState::Connecting) => "Connecting…",
        (false, LiveState::Polling) => "Polling",
    };
    let state = move || {
        if live.paused.get() {
            "paused"
        } else {
            live.state.get().as_str()
        }
    };
    view! {
        <span class="live" data-testid="live-state" data-state=state data-notices=move || live.notices() role="status">{label}</span>
        <button type="button" class="link-button live-toggle" data-testid="live-toggle"
            aria-pressed=move || live.paused.get().to_string()
            on:click=move |_| live.paused.update(|p| *p = !*p)>
            {move || if live.paused.get() { "Resume updates" } else { "Pause updates" }}
        </button>
    }
    .into_any()
}
