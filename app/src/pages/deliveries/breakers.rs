//! The Deliveries page's panel of destinations whose circuit breaker is open
//! (issue 10): their events wait for a probe without spending attempts.
//! Operators (`runs:write`) can close a breaker by hand; it is audited.

use leptos::prelude::*;

use crate::api::{close_destination_breaker, destination_breakers};
use crate::components::{poll_while_visible, StoresUnavailable};
use crate::dto::BreakerView;
use crate::format::display_time;

#[component]
pub fn BreakerPanel(may_close: bool) -> impl IntoView {
    let breakers = Resource::new(|| (), |_| destination_breakers());
    let close = Action::new(|destination: &String| close_destination_breaker(destination.clone()));
    Effect::new(move |_| {
        if close.value().get().is_some() {
            breakers.refetch();
        }
    });
    poll_while_visible(|| true, move || breakers.refetch());
    view! {
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                // Readers without the permission, or a store without an outbox, see no panel.
                let list = breakers.await.unwrap_or_default();
                let unavailable = list.unavailable;
                let open: Vec<BreakerView> = list
                    .breakers
                    .into_iter()
                    .filter(|b| b.state != "closed")
                    .collect();
                let panel = (!open.is_empty()).then(|| view! {
                    <section class="panel breakers" aria-labelledby="breakers-title" data-testid="breakers">
                        <h2 id="breakers-title">"Resting destinations"</h2>
                        <p class="muted">"These destinations failed repeatedly. Their deliveries wait for a probe and spend no attempts meanwhile."</p>
                        <ul class="breaker-list">
                            {open.into_iter().map(|b| {
                                let destination = b.destination.clone();
                                let state = if b.state == "half_open" { "probing" } else { "open" };
                                view! {
                                    <li data-testid="breaker" data-route=b.route.clone()>
                                        <strong>{b.route.clone()}</strong>
                                        " " <span class="mono">{b.destination.clone()}</span>
                                        " " <span class="badge delivery-failed" data-testid="breaker-state">{state}</span>
                                        " " <span class="muted">{format!("after {} failures", b.failures)}</span>
                                        {b.probe_at.clone().map(|at| view! { " · " <span class="muted">"probe " {display_time(&at)}</span> })}
                                        {may_close.then(|| view! {
                                            " " <button type="button" class="button" data-testid="breaker-close"
                                                disabled=move || close.pending().get()
                                                on:click=move |_| { close.dispatch(destination.clone()); }>
                                                "Close"
                                            </button>
                                        })}
                                    </li>
                                }
                            }).collect_view()}
                        </ul>
                        {move || close.value().get().and_then(|r| r.err()).map(|f| view! { <p class="alert error">{f.message}</p> })}
                    </section>
                });
                view! { <StoresUnavailable unavailable /> {panel} }
            })}
        </Transition>
    }
}
