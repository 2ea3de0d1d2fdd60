//! The console's document shell and router: every page is a module here, and the
//! shared chrome is in [`crate::components`].

mod approvals;
mod audit;
mod deliveries;
mod login;
mod not_found;
mod overview;
mod records;
mod run;
mod runs;
mod search;
mod users;

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Title};
use leptos_router::components::{Route, Router, Routes};
use leptos_router::{path, SsrMode};

use not_found::NotFound;

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
    provide_context(crate::live::Live::start());
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
                <Route path=path!("/overview") view=overview::OverviewPage ssr=SsrMode::Async />
                <Route path=path!("/runs") view=runs::RunsPage ssr=SsrMode::Async />
                <Route path=path!("/runs/:id") view=run::RunPage ssr=SsrMode::Async />
                <Route path=path!("/audit") view=audit::AuditPage ssr=SsrMode::Async />
                <Route path=path!("/deliveries") view=deliveries::DeliveriesPage ssr=SsrMode::Async />
                <Route path=path!("/approvals") view=approvals::ApprovalsPage />
                <Route path=path!("/search") view=search::SearchPage ssr=SsrMode::Async />
                <Route path=path!("/users") view=users::UsersPage ssr=SsrMode::Async />
                <Route path=path!("/records") view=records::RecordsPage ssr=SsrMode::Async />
            </Routes>
        </Router>
    }
}
