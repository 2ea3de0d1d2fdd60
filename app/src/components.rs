//! The console's shared chrome and helpers, used by every page: the top bar, the
//! designed error and capability states, the scrolling table panel, the page's HTTP
//! status; live refresh is [`crate::live`]'s. Imports no page.

use leptos::prelude::*;
use leptos_router::components::A;

use crate::api::{config_notices, current_viewer, Failure};
use crate::dto::{Permission, Viewer};
use crate::format::encode;
pub use crate::live::poll_while_visible;
use crate::live::LiveControl;

/// Whether the keyboard focus is inside an element matching `selector` (someone is
/// typing in a filter or confirming an action: do not redraw under them).
pub fn focus_within(selector: &str) -> bool {
    document()
        .active_element()
        .and_then(|el| el.closest(selector).ok().flatten())
        .is_some()
}

/// Sets the HTTP status of the page being rendered on the server.
pub fn set_status(status: u16) {
    #[cfg(feature = "ssr")]
    if let (Some(options), Ok(code)) = (
        use_context::<leptos_axum::ResponseOptions>(),
        http::StatusCode::from_u16(status),
    ) {
        options.set_status(code);
    }
    #[cfg(not(feature = "ssr"))]
    let _ = status;
}

/// A failed load, designed by its status: not found, not allowed, or a server error.
#[component]
pub fn ErrorPanel(
    failure: Failure,
    /// What could not be loaded, e.g. "Runs could not be loaded".
    what: &'static str,
    /// Where "Try again" goes.
    retry: String,
) -> impl IntoView {
    set_status(failure.status);
    if failure.status == 501 {
        return view! { <CapabilityNotice reason=failure.message /> }.into_any();
    }
    let (code, title, advice) = match failure.status {
        401 => ("401", "Sign in to continue", "Your session has ended."),
        403 => (
            "403",
            "You do not have access to this page",
            "Your role does not include the permission it needs. Ask an admin if you need it.",
        ),
        404 => ("404", "Not found", "It may have been removed, or the link may be mistyped."),
        400 => ("400", what, "The request was not understood."),
        _ => (
            "500",
            "Something went wrong",
            "The server could not answer. Try again in a moment; if it keeps failing, check the server's log.",
        ),
    };
    view! {
        <div class="panel state error" role="alert" data-testid="error-state" data-status=failure.status>
            <p class="state-code">{code}</p>
            <h2>{title}</h2>
            <p>{advice}</p>
            <p class="muted small">{failure.message}</p>
            <p class="actions">
                <a href=retry rel="external" class="button">"Try again"</a>
                <a href="/runs" class="button">"Go to Runs"</a>
            </p>
        </div>
    }
    .into_any()
}

/// A capability this store does not have (HTTP 501 `capability_unavailable`): a
/// designed notice, not an error — trying again will not change it.
#[component]
pub fn CapabilityNotice(
    /// The server's explanation.
    reason: String,
) -> impl IntoView {
    view! {
        <div class="panel state" role="note" data-testid="capability-unavailable">
            <h2>"Durable delivery unavailable on this store"</h2>
            <p>
                "This server runs on an ephemeral store: runs are kept while it runs, but notifications are "
                "sent once, best effort, right after each transition, and are not recorded. There is nothing "
                "to list, retry or audit here."
            </p>
            <p class="muted small">{reason}</p>
            <p class="actions">
                <a href="/runs" class="button">"Go to Runs"</a>
            </p>
        </div>
    }
}

/// With the approvals database apart: which store a page could not read, so its
/// rows are missing while the other store's are shown (one line a store).
#[component]
pub fn StoresUnavailable(unavailable: Vec<String>) -> impl IntoView {
    unavailable
        .into_iter()
        .map(|why| {
            view! {
                <p class="alert warn" role="status" data-testid="store-unavailable">
                    <strong>"Part of this page is missing. "</strong>
                    {why}
                </p>
            }
        })
        .collect_view()
}

/// A table panel that scrolls sideways when wider than the screen: a focusable,
/// named region, so a keyboard can scroll it too.
#[component]
pub fn ScrollingTable(
    /// What the region holds, for screen readers.
    label: &'static str,
    children: Children,
) -> impl IntoView {
    view! {
        <div class="panel table-wrap" tabindex="0" role="region" aria-label=label>
            {children()}
        </div>
    }
}

/// Who is signed in, read once a page: the page's parts (the top bar, a form
/// only some may use) share one read.
pub type ViewerResource = Resource<Result<Option<Viewer>, Failure>>;

#[derive(Clone, Copy)]
struct PageViewer(ViewerResource);

/// The viewer of the page being shown: the first part of a page that asks reads
/// it, and the parts below share that read.
pub fn page_viewer() -> ViewerResource {
    use_context::<PageViewer>()
        .map(|PageViewer(viewer)| viewer)
        .unwrap_or_else(|| {
            let viewer = Resource::new(|| (), |_| current_viewer());
            provide_context(PageViewer(viewer));
            viewer
        })
}

/// A navigation link offered only to a viewer who holds `permission` (the page
/// refuses everyone else, so nobody is shown a door that will not open).
#[component]
fn NavLinkFor(
    viewer: ViewerResource,
    permission: Permission,
    href: &'static str,
    label: &'static str,
) -> impl IntoView {
    view! {
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                viewer
                    .await
                    .ok()
                    .flatten()
                    .filter(|viewer| viewer.can(permission))
                    .map(|_| view! { <A href=href>{label}</A> })
            })}
        </Suspense>
    }
}

/// The top bar: product name, navigation and who is signed in.
#[component]
pub fn TopBar() -> impl IntoView {
    let viewer = page_viewer();
    // `/` anywhere but in a field goes to the search box.
    let slash = window_event_listener(leptos::ev::keydown, focus_find_on_slash);
    on_cleanup(move || slash.remove());
    view! {
        // The first stop of the keyboard: past the bar, straight to the page.
        <a class="skip-link" href="#main" data-testid="skip-link" on:click=focus_main>
            "Skip to content"
        </a>
        <header class="topbar">
            <a class="brand" href="/overview">
                <span class="brand-mark" aria-hidden="true">"◆"</span>
                "Herald"
            </a>
            <nav aria-label="Main">
                <A href="/overview">"Overview"</A>
                <A href="/runs">"Runs"</A>
                <A href="/deliveries">"Deliveries"</A>
                // The trail needs runs:write.
                <NavLinkFor viewer permission=Permission::RunsWrite href="/audit" label="Audit" />
                <A href="/approvals">"Approvals"</A>
                <A href="/records">"Records"</A>
                <NavLinkFor viewer permission=Permission::UsersManage href="/users" label="Users" />
            </nav>
            // A plain form: the server answers a single match with a redirect.
            <form class="find" role="search" action="/search" method="get">
                <input
                    id="find-q"
                    name="q"
                    type="search"
                    aria-label="Find by id"
                    placeholder="Find by id (press /)"
                    autocomplete="off"
                    spellcheck="false"
                    data-testid="find-input"
                />
            </form>
            <div class="who">
                <LiveControl />
                <Suspense fallback=|| ()>
                    {move || Suspend::new(async move {
                        match viewer.await {
                            Ok(Some(viewer)) => view! { <ViewerBadge viewer /> }.into_any(),
                            _ => view! { <a href="/login">"Sign in"</a> }.into_any(),
                        }
                    })}
                </Suspense>
            </div>
        </header>
    }
}

/// A long id (an event's, say) shown cut to a column's width, whole on hover and
/// to screen readers, and copied whole by its button: a long id never pushes a
/// table's columns over each other.
#[component]
pub fn LongId(id: String, #[prop(into)] label: String) -> impl IntoView {
    let copied = RwSignal::new(false);
    let whole = id.clone();
    let title = id.clone();
    let copy = move |_| {
        let _ = window().navigator().clipboard().write_text(&whole);
        copied.set(true);
    };
    view! {
        <span class="long-id">
            <span class="mono truncate" title=title data-testid="long-id">{id}</span>
            <button
                type="button"
                class="copy-id"
                aria-label=format!("Copy the {label}")
                title="Copy"
                data-testid="copy-id"
                on:click=copy
            >
                {move || if copied.get() { "Copied" } else { "Copy" }}
            </button>
        </span>
    }
}

/// `/` typed outside a field focuses the header's search box.
fn focus_find_on_slash(ev: leptos::ev::KeyboardEvent) {
    use wasm_bindgen::JsCast;
    if ev.key() != "/" || ev.ctrl_key() || ev.meta_key() || ev.alt_key() {
        return;
    }
    let typing = ev
        .target()
        .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
        .is_some_and(|el| {
            matches!(el.tag_name().as_str(), "INPUT" | "TEXTAREA" | "SELECT")
                || el.has_attribute("contenteditable")
        });
    if typing {
        return;
    }
    let find = document()
        .get_element_by_id("find-q")
        .and_then(|el| el.dyn_into::<web_sys::HtmlElement>().ok());
    if let Some(find) = find {
        ev.prevent_default();
        let _ = find.focus();
    }
}

/// The skip link's action once the app runs: focus the page's `<main>` (the
/// router would otherwise take the `#main` link as a navigation and move no
/// focus); before hydration the browser follows the fragment itself.
fn focus_main(ev: leptos::ev::MouseEvent) {
    use wasm_bindgen::JsCast;
    let main = document()
        .get_element_by_id("main")
        .and_then(|el| el.dyn_into::<web_sys::HtmlElement>().ok());
    if let Some(main) = main {
        ev.prevent_default();
        let _ = main.focus();
    }
}

#[component]
fn ViewerBadge(viewer: Viewer) -> impl IntoView {
    let role = viewer.role.as_str();
    view! {
        <span class="viewer" data-testid="viewer">
            <span class="viewer-name">{viewer.name}</span>
            <span class=format!("role role-{role}") data-testid="viewer-role">{role}</span>
        </span>
        <form method="post" action="/auth/logout" class="inline">
            <button type="submit" class="link-button" data-testid="logout">"Sign out"</button>
        </form>
    }
}

/// What the node's configuration keeps from working (a callback signing secret it
/// cannot read), above the page's content. Nothing when all is well; a muted line
/// when the check itself could not be loaded (the page below still works).
#[component]
pub fn ConfigNotices() -> impl IntoView {
    let notices = Resource::new(|| (), |_| config_notices());
    view! {
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                match notices.await {
                    Ok(list) if list.is_empty() => ().into_any(),
                    Ok(list) => view! {
                        <div class="alert warn config-notices" role="alert" data-testid="config-notices">
                            <h2>"This node's configuration needs attention"</h2>
                            <ul>
                                {list
                                    .into_iter()
                                    .map(|n| {
                                        let setting = n.setting.clone();
                                        view! {
                                            <li data-testid="config-notice" data-setting=setting>
                                                <code>{n.setting}</code>": "{n.problem}
                                            </li>
                                        }
                                    })
                                    .collect_view()}
                            </ul>
                        </div>
                    }
                    .into_any(),
                    // Signed out: the page itself says so.
                    Err(failure) if failure.status == 401 => ().into_any(),
                    Err(failure) => view! {
                        <p class="muted small" data-testid="config-notices-error">
                            "The configuration checks could not be loaded: "{failure.message}
                        </p>
                    }
                    .into_any(),
                }
            })}
        </Transition>
    }
}

/// Download links for every row a page's filters match, not only the page on
/// screen: `path?format=csv|ndjson&<params>`. Plain links (the router leaves
/// `download` links to the browser), served with the viewer's redaction.
#[component]
pub fn ExportLinks(path: &'static str, params: Vec<(&'static str, String)>) -> impl IntoView {
    let href = move |format: &str| {
        let query = std::iter::once(format!("format={format}"))
            .chain(
                params
                    .iter()
                    .map(|(key, value)| format!("{key}={}", encode(value))),
            )
            .collect::<Vec<_>>()
            .join("&");
        format!("{path}?{query}")
    };
    view! {
        <div class="export" role="group" aria-label="Export every matching row">
            <span class="muted">"Export all matching:"</span>
            <a href=href("csv") class="button" rel="external" download="" data-testid="export-csv">"CSV"</a>
            <a href=href("ndjson") class="button" rel="external" download="" data-testid="export-ndjson">"NDJSON"</a>
        </div>
    }
}
