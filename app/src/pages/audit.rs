//! The audit page: who retried which delivery (or, in bulk, how many matching which
//! filter), when, from which state, and whether they acknowledged the duplicate
//! risk; who closed a breaker; who changed which user or token. Operators and
//! admins; the server refuses readers, and the page shows that refusal as a
//! designed 403.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use crate::api::audit_trail;
use crate::components::{
    ErrorPanel, ExportLinks, LongId, ScrollingTable, StoresUnavailable, TopBar,
};
use crate::dto::AuditPage as Page;
use crate::format::display_time;

#[component]
pub fn AuditPage() -> impl IntoView {
    let query = use_query_map();
    let after = Memo::new(move |_| query.with(|q| q.get("after").filter(|a| !a.is_empty())));
    let page = Resource::new(move || after.get(), audit_trail);
    view! {
        <Title text="Audit · Herald" />
        <TopBar />
        <main id="main" tabindex="-1" class="page">
            <div class="page-head">
                <div>
                    <h1>"Audit"</h1>
                    <p class="muted">"Every manual retry, breaker close and change to users and tokens: who, when, from which state, and whether the duplicate risk was acknowledged."</p>
                </div>
            </div>
            <Transition fallback=|| view! { <div class="panel state">"Loading the audit trail…"</div> }>
                {move || Suspend::new(async move {
                    match page.await {
                        Ok(page) => view! { <AuditTable page /> }.into_any(),
                        Err(failure) => view! { <ErrorPanel failure what="The audit trail could not be loaded" retry="/audit".to_string() /> }.into_any(),
                    }
                })}
            </Transition>
        </main>
    }
}

#[component]
fn AuditTable(page: Page) -> impl IntoView {
    let unavailable = page.unavailable;
    if page.entries.is_empty() {
        return view! {
            <StoresUnavailable unavailable />
            <div class="panel state" data-testid="audit-empty">
                <h2>"Nothing audited yet"</h2>
                <p class="muted">"Manual retries, breaker closes and changes to users and tokens appear here as they are made."</p>
            </div>
        }
        .into_any();
    }
    let next = page
        .next_cursor
        .map(|cursor| format!("/audit?after={cursor}"));
    view! {
        <StoresUnavailable unavailable />
        <ScrollingTable label="Audit trail">
            <table class="runs" data-testid="audit-table">
                <thead>
                    <tr>
                        <th>"When"</th>
                        <th>"Who"</th>
                        <th>"Action"</th>
                        <th>"Subject"</th>
                        <th>"Count"</th>
                        <th>"From state"</th>
                        <th>"Duplicate risk"</th>
                        <th>"Reason"</th>
                    </tr>
                </thead>
                <tbody>
                    {page
                        .entries
                        .into_iter()
                        .map(|e| {
                            let from = e.from_status.clone();
                            let event_id = e.event_id.clone();
                            let one_delivery = e.action == "retry" || e.action == "skip";
                            view! {
                                <tr data-testid="audit-row" data-event-id=event_id>
                                    <td class="time" title=e.at.clone()>{display_time(&e.at)}</td>
                                    <td data-testid="audit-actor">{e.actor}</td>
                                    <td>{e.action}</td>
                                    // One delivery's id is cut to the column (whole on hover,
                                    // copied whole); a bulk action's filter wraps.
                                    <td class="wrap">
                                        {if one_delivery {
                                            view! { <LongId id=e.event_id label="event id" /> }.into_any()
                                        } else {
                                            view! { <span class="mono">{e.event_id}</span> }.into_any()
                                        }}
                                    </td>
                                    <td data-testid="audit-count">{e.affected}</td>
                                    <td><span class=format!("badge delivery-{from}") data-testid="audit-from">{e.from_status}</span></td>
                                    <td data-testid="audit-ack">
                                        {if e.acknowledged_duplicate_risk { "acknowledged" } else { "—" }}
                                    </td>
                                    <td class="wrap" data-testid="audit-reason">{e.reason.unwrap_or_else(|| "—".into())}</td>
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
        </ScrollingTable>
        <div class="below-table">
            <ExportLinks path="/audit/export" params=Vec::new() />
            <nav class="pager" aria-label="Pages">
                {next.map(|href| view! { <a href=href class="button">"Older entries →"</a> })}
            </nav>
        </div>
    }
    .into_any()
}
