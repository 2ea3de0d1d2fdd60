//! The console's document shell, router and shared chrome.

mod approvals;
mod login;
mod runs;

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Title};
use leptos_router::components::{Route, Router, Routes, A};
use leptos_router::path;

use crate::api::current_viewer;
use crate::dto::Viewer;

/// The HTML document the server renders around the app.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <link rel="icon" href="/favicon.svg" type="image/svg+xml" />
                <link rel="stylesheet" href="/pkg/herald.css" />
                <HydrationScripts options />
                <MetaTags />
            </head>
            <body>
                <App />
            </body>
        </html>
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    // Marks the page once the WASM app has taken over, so tests (and people) can tell.
    Effect::new(move |_| {
        if let Some(body) = document().body() {
            let _ = body.set_attribute("data-hydrated", "true");
        }
    });
    view! {
        <Title text="Herald" />
        <Router>
            <Routes fallback=NotFound>
                <Route path=path!("/login") view=login::LoginPage />
                <Route path=path!("/runs") view=runs::RunsPage />
                <Route path=path!("/approvals") view=approvals::ApprovalsPage />
            </Routes>
        </Router>
    }
}

#[component]
fn NotFound() -> impl IntoView {
    view! {
        <main class="page narrow">
            <div class="panel state">
                <h1>"Page not found"</h1>
                <p>"There is nothing at this address."</p>
                <A href="/runs">"Go to Runs"</A>
            </div>
        </main>
    }
}

/// The top bar: product name, navigation and who is signed in.
#[component]
fn TopBar() -> impl IntoView {
    let viewer = Resource::new(|| (), |_| current_viewer());
    view! {
        <header class="topbar">
            <a class="brand" href="/runs">
                <span class="brand-mark" aria-hidden="true">"◆"</span>
                "Herald"
            </a>
            <nav>
                <A href="/runs">"Runs"</A>
                <A href="/approvals">"Approvals"</A>
            </nav>
            <div class="who">
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
