//! The sign-in page: a plain form, so it works before (and without) hydration.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

#[component]
pub fn LoginPage() -> impl IntoView {
    let query = use_query_map();
    let error = move || {
        query.with(|q| match q.get("error").as_deref() {
            Some("throttled") => {
                Some("Too many failed attempts. Wait a few minutes, then try again.")
            }
            Some(_) => Some("Invalid username or password."),
            None => None,
        })
    };
    let next = move || query.with(|q| q.get("next").unwrap_or_else(|| "/overview".to_string()));
    view! {
        <Title text="Sign in · Herald" />
        <main id="main" tabindex="-1" class="login">
            <form class="panel login-card" method="post" action="/auth/login">
                <h1 class="brand big">
                    <span class="brand-mark" aria-hidden="true">"◆"</span>
                    "Herald"
                </h1>
                <p class="muted">"Sign in to the operator console."</p>
                {move || {
                    error()
                        .map(|message| {
                            view! {
                                <p class="alert error" role="alert" data-testid="login-error">
                                    {message}
                                </p>
                            }
                        })
                }}
                <label>
                    "Username" <input name="username" autocomplete="username" required autofocus />
                </label>
                <label>
                    "Password"
                    <input name="password" type="password" autocomplete="current-password" required />
                </label>
                // An attribute, not a property: it is in the server's HTML, so a form
                // sent before hydration still goes back to the page asked for.
                <input type="hidden" name="next" value=next />
                <button type="submit" class="primary">"Sign in"</button>
            </form>
        </main>
    }
}
