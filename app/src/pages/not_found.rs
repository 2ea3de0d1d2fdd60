//! The page for an address with nothing at it (HTTP 404).

use leptos::prelude::*;
use leptos_meta::Title;

use crate::components::{set_status, TopBar};

#[component]
pub fn NotFound() -> impl IntoView {
    set_status(404);
    view! {
        <Title text="Page not found · Herald" />
        <TopBar />
        <main id="main" tabindex="-1" class="page narrow">
            <div class="panel state" data-testid="not-found">
                <p class="state-code">"404"</p>
                <h1>"Page not found"</h1>
                <p class="muted">"There is nothing at this address. It may have moved, or the link may be mistyped."</p>
                <a href="/runs" class="button">"Go to Runs"</a>
            </div>
        </main>
    }
}
