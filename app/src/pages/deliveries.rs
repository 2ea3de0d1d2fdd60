//! The Deliveries page: every outbox event of every source, filtered by kind, state,
//! source and creation time, newest first, keyset-paged, opening on the deliveries
//! that need attention. Operators retry everything matching the filter in one
//! action: the count first, at most 1,000 per action, `uncertain` ones only with the
//! acknowledgement.

mod breakers;
mod lanes;

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::components::Form;
use leptos_router::hooks::use_query_map;

use crate::api::{bulk_retry, list_deliveries, list_failure_groups, preview_bulk_retry, Failure};
use crate::components::{
    focus_within, page_viewer, poll_while_visible, ErrorPanel, ExportLinks, LongId, ScrollingTable,
    StoresUnavailable, TopBar,
};
use crate::dto::{
    BulkOutcome, BulkPreview, DeliveryFilter, DeliveryPage, DeliveryQuery, DeliveryStatus,
    DeliveryView, FailureGroups, Permission, NO_DESTINATION,
};
use crate::format::{display_time, encode, short_id};
use breakers::BreakerPanel;
use lanes::BlockedLanesPanel;

/// The `status` parameter that shows every state (the page opens on needs-attention).
const ALL: &str = "all";

fn query_href(query: &DeliveryQuery, status: Option<&str>, after: Option<&str>) -> String {
    let params: Vec<String> = [
        ("kind", query.kind.as_deref()),
        ("status", status),
        ("source", query.source.as_deref()),
        ("destination", query.destination.as_deref()),
        ("cause", query.cause.as_deref()),
        ("from", query.created_from.as_deref()),
        ("to", query.created_to.as_deref()),
        ("after", after),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| format!("{k}={}", encode(v))))
    .collect();
    format!("/deliveries?{}", params.join("&"))
}

#[component]
pub fn DeliveriesPage() -> impl IntoView {
    let params = use_query_map();
    // The URL's `status`: absent means needs attention; `all` means every state.
    let status_param = Memo::new(move |_| params.with(|q| q.get("status")));
    let query = Memo::new(move |_| {
        params.with(|q| {
            let get = |key: &str| q.get(key).filter(|v| !v.is_empty());
            let status = match get("status").as_deref() {
                None => Some(DeliveryFilter::NEEDS_ATTENTION.to_string()),
                Some(ALL) => None,
                Some(other) => Some(other.to_string()),
            };
            DeliveryQuery {
                kind: get("kind"),
                status,
                source: get("source"),
                parent: None,
                created_from: get("from"),
                created_to: get("to"),
                destination: get("destination"),
                cause: get("cause"),
                after: get("after"),
                limit: None,
            }
        })
    });
    let page = Resource::new(move || query.get(), list_deliveries);
    let viewer = page_viewer();
    // The groups count everything that needs attention: they show on that view
    // (the page's first), not yet narrowed to one group.
    let shows_groups = Memo::new(move |_| {
        let q = query.get();
        q.status.as_deref() == Some(DeliveryFilter::NEEDS_ATTENTION)
            && q.destination.is_none()
            && q.cause.is_none()
    });
    let groups = Resource::new(
        move || shows_groups.get(),
        |shown| async move {
            if shown {
                list_failure_groups().await.map(Some)
            } else {
                Ok(None)
            }
        },
    );
    // Live updates, except while someone is using the filters or a bulk action.
    poll_while_visible(
        move || !focus_within(".filters") && !focus_within(".bulk"),
        move || {
            page.refetch();
            groups.refetch();
        },
    );
    view! {
        <Title text="Deliveries · Herald" />
        <TopBar />
        <main id="main" tabindex="-1" class="page">
            <div class="page-head">
                <div>
                    <h1>"Deliveries"</h1>
                    <p class="muted">"Every owed side effect of every source, newest first. The page opens on those that need attention."</p>
                </div>
            </div>
            <DeliveryFilters query=query status_param=status_param />
            <Transition fallback=|| ()>
                {move || Suspend::new(async move {
                    let status = status_param.get_untracked();
                    match groups.await {
                        Ok(Some(groups)) => view! { <FailureGroupsPanel groups status /> }.into_any(),
                        // No durable outbox (501): the page below says so once.
                        Ok(None) => ().into_any(),
                        Err(failure) if failure.status == 501 => ().into_any(),
                        Err(failure) => view! {
                            <p class="muted small" role="status" data-testid="failure-groups-error">
                                "Failures could not be grouped: "{failure.message}
                            </p>
                        }.into_any(),
                    }
                })}
            </Transition>
            <Suspense fallback=|| ()>
                {move || Suspend::new(async move {
                    let may_retry = matches!(viewer.await, Ok(Some(v)) if v.can(Permission::RunsWrite));
                    view! {
                        <BreakerPanel may_close=may_retry />
                        <BlockedLanesPanel />
                        {may_retry.then(|| view! {
                            <BulkRetry query=query on_done=Callback::new(move |_| page.refetch()) />
                        })}
                    }
                })}
            </Suspense>
            <Transition fallback=|| view! { <div class="panel state">"Loading deliveries…"</div> }>
                {move || Suspend::new(async move {
                    let current = query.get_untracked();
                    let status = status_param.get_untracked();
                    match page.await {
                        Ok(result) => view! { <DeliveriesTable page=result query=current status /> }.into_any(),
                        Err(failure) => view! { <ErrorPanel failure what="Deliveries could not be loaded" retry="/deliveries".to_string() /> }.into_any(),
                    }
                })}
            </Transition>
        </main>
    }
}

#[component]
fn DeliveryFilters(
    query: Memo<DeliveryQuery>,
    status_param: Memo<Option<String>>,
) -> impl IntoView {
    move || {
        let q = query.get();
        let current = status_param.get();
        let chips = [
            (None, "Needs attention"),
            (Some(ALL), "All"),
        ]
        .into_iter()
        .chain(DeliveryStatus::ALL.into_iter().map(|s| (Some(s.as_str()), s.label())))
        .map(|(value, label)| {
            let active = current.as_deref() == value;
            let href = query_href(&q, value, None);
            let testid = format!("state-{}", value.unwrap_or("attention"));
            view! {
                <a href=href class="chip" class:active=active aria-current=active.then_some("true") data-testid=testid>{label}</a>
            }
        })
        .collect_view();
        let source = q.source.clone().unwrap_or_default();
        // A failure group the view is narrowed to, and the way back to all of them.
        let group = (q.destination.is_some() || q.cause.is_some()).then(|| {
            let everything = DeliveryQuery {
                destination: None,
                cause: None,
                ..q.clone()
            };
            let clear = query_href(&everything, current.as_deref(), None);
            let destination = q
                .destination
                .clone()
                .map(|d| destination_label(&d).to_string());
            view! {
                <p class="group-filter" data-testid="group-filter">
                    "Group: "
                    {q.cause.clone().map(|c| view! { <strong>{c}</strong> })}
                    {destination.map(|d| view! { " at " <span class="mono">{d}</span> })}
                    " · "
                    <a href=clear data-testid="clear-group">"Every group"</a>
                </p>
            }
        });
        view! {
            <div class="filters panel">
                <div class="chips" role="group" aria-label="State">{chips}</div>
                {group}
                <Form method="GET" action="/deliveries">
                    <div class="filter-form">
                        {current.clone().map(|s| view! { <input type="hidden" name="status" value=s /> })}
                        {q.destination.clone().map(|d| view! { <input type="hidden" name="destination" value=d /> })}
                        {q.cause.clone().map(|c| view! { <input type="hidden" name="cause" value=c /> })}
                        <label class="field">
                            <span>"Kind"</span>
                            <input name="kind" size="12" data-testid="kind-filter" value=q.kind.clone().unwrap_or_default() />
                        </label>
                        <label class="field">
                            <span>"Source"</span>
                            <select name="source" data-testid="source-filter">
                                <option value="" selected=source.is_empty()>"Any"</option>
                                <option value="jobs" selected=source == "jobs">"jobs"</option>
                                <option value="approvals" selected=source == "approvals">"approvals"</option>
                            </select>
                        </label>
                        <label class="field">
                            <span>"Created from"</span>
                            <input type="date" name="from" value=q.created_from.clone().unwrap_or_default() />
                        </label>
                        <label class="field">
                            <span>"to"</span>
                            <input type="date" name="to" value=q.created_to.clone().unwrap_or_default() />
                        </label>
                        <button type="submit" class="button" data-testid="apply-delivery-filters">"Apply"</button>
                    </div>
                </Form>
            </div>
        }
    }
}

/// What a destination filter value shows.
fn destination_label(destination: &str) -> &str {
    if destination == NO_DESTINATION {
        "no destination"
    } else {
        destination
    }
}

/// The deliveries that need attention, one row a kind, destination and cause:
/// each opens the view of its group, where the bulk retry retries it.
#[component]
fn FailureGroupsPanel(groups: FailureGroups, status: Option<String>) -> impl IntoView {
    // A store that could not be read is named once, above the list below.
    let partial = !groups.unavailable.is_empty();
    if groups.groups.is_empty() {
        let text = if partial {
            "No failed or uncertain delivery in the stores that could be read."
        } else {
            "Nothing needs attention: no delivery is failed or uncertain."
        };
        return view! {
            <div class="panel failure-groups" data-testid="failure-groups-empty">
                <h2>"Failures by cause"</h2>
                <p class="muted">{text}</p>
            </div>
        }
        .into_any();
    }
    let more = groups.more;
    let rows = groups
        .groups
        .into_iter()
        .map(|g| {
            let destination = g.destination.clone().unwrap_or_else(|| NO_DESTINATION.to_string());
            let href = query_href(
                &DeliveryQuery {
                    kind: Some(g.kind.clone()),
                    source: Some(g.source.clone()),
                    destination: Some(destination.clone()),
                    cause: Some(g.cause.clone()),
                    ..DeliveryQuery::default()
                },
                status.as_deref(),
                None,
            );
            let label = format!("Open the {} {} failures: {}", g.count, g.kind, g.cause);
            let kind = g.kind.clone();
            view! {
                <tr data-testid="failure-group" data-destination=destination.clone() data-kind=kind>
                    <td class="wrap">{g.cause}</td>
                    <td>{g.kind}</td>
                    <td>{g.source}</td>
                    <td class="mono wrap">{destination_label(&destination).to_string()}</td>
                    <td data-testid="group-count">{g.count}</td>
                    <td class="time" title=g.first_seen.clone()>{display_time(&g.first_seen)}</td>
                    <td class="time" title=g.last_seen.clone()>{display_time(&g.last_seen)}</td>
                    <td><a href=href class="button" aria-label=label data-testid="open-group">"Open group"</a></td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <section class="panel failure-groups" aria-labelledby="failure-groups-title" data-testid="failure-groups">
            <h2 id="failure-groups-title">"Failures by cause"</h2>
            <p class="muted">"Deliveries that need attention, grouped by kind, source, destination and the class of their last error. Open a group to see its deliveries and retry them together."</p>
            <ScrollingTable label="Failure groups">
                <table class="runs">
                    <thead>
                        <tr>
                            <th>"Cause"</th>
                            <th>"Kind"</th>
                            <th>"Source"</th>
                            <th>"Destination"</th>
                            <th>"Count"</th>
                            <th>"First seen"</th>
                            <th>"Last seen"</th>
                            <th><span class="visually-hidden">"Open"</span></th>
                        </tr>
                    </thead>
                    <tbody>{rows}</tbody>
                </table>
            </ScrollingTable>
            {more.then(|| view! { <p class="muted small" data-testid="failure-groups-more">"More groups exist than these 50 largest; retry or fix these first, and the rest will show."</p> })}
        </section>
    }
    .into_any()
}

#[component]
fn DeliveriesTable(
    page: DeliveryPage,
    query: DeliveryQuery,
    status: Option<String>,
) -> impl IntoView {
    let next = page
        .next_cursor
        .map(|cursor| query_href(&query, status.as_deref(), Some(&cursor)));
    let first = query
        .after
        .is_some()
        .then(|| query_href(&query, status.as_deref(), None));
    let unavailable = page.unavailable;
    // Every row the filters match, not only this page; none when nothing matches.
    let export = (!page.events.is_empty()).then(|| {
        let params = [
            ("kind", query.kind.clone()),
            ("status", query.status.clone()),
            ("source", query.source.clone()),
            ("destination", query.destination.clone()),
            ("cause", query.cause.clone()),
            ("since", query.created_from.clone()),
            ("until", query.created_to.clone()),
        ]
        .into_iter()
        .filter_map(|(key, value)| value.map(|value| (key, value)))
        .collect::<Vec<_>>();
        view! { <ExportLinks path="/deliveries/export" params /> }
    });
    let body = if page.events.is_empty() {
        view! {
            <div class="panel state" data-testid="deliveries-empty">
                <h2>"Nothing here"</h2>
                <p class="muted">"No delivery matches these filters."</p>
                <a href="/deliveries?status=all" class="button">"Show every delivery"</a>
            </div>
        }
        .into_any()
    } else {
        view! {
            <ScrollingTable label="Deliveries">
                <table class="runs" data-testid="deliveries-table">
                    <thead>
                        <tr>
                            <th>"Delivery"</th>
                            <th>"Kind"</th>
                            <th>"Source"</th>
                            <th>"Parent"</th>
                            <th>"State"</th>
                            <th>"Attempts"</th>
                            <th>"Last error"</th>
                            <th>"Created"</th>
                        </tr>
                    </thead>
                    <tbody>
                        {page.events.into_iter().map(|d| view! { <DeliveryRow d /> }).collect_view()}
                    </tbody>
                </table>
            </ScrollingTable>
        }
        .into_any()
    };
    view! {
        <StoresUnavailable unavailable />
        {body}
        <div class="below-table">
            {export}
            <nav class="pager" aria-label="Pages">
                {first.map(|href| view! { <a href=href class="button">"← First page"</a> })}
                {next.map(|href| view! { <a href=href class="button" data-testid="deliveries-next">"Next page →"</a> })}
            </nav>
        </div>
    }
}

#[component]
fn DeliveryRow(d: DeliveryView) -> impl IntoView {
    let status = d.status.as_str();
    let parent = if d.parent_type == "run" {
        view! { <a href=format!("/runs/{}", d.parent_id)>"run " {short_id(&d.parent_id)}</a> }
            .into_any()
    } else {
        view! { <span>{d.parent_type.clone()} " " {short_id(&d.parent_id)}</span> }.into_any()
    };
    view! {
        <tr data-testid="delivery-row" data-event-id=d.event_id.clone()>
            <td><LongId id=d.event_id.clone() label="event id" /></td>
            <td>{d.kind.clone()}</td>
            <td>{d.source.clone()}</td>
            <td>{parent}</td>
            <td><span class=format!("badge delivery-{status}") data-testid="row-status">{d.status.label()}</span></td>
            <td>{d.attempts}</td>
            <td class="error-text wrap">{d.last_error.clone().unwrap_or_else(|| "—".into())}</td>
            <td class="time" title=d.created_at.clone()>{display_time(&d.created_at)}</td>
        </tr>
    }
}

/// Retry everything the filter matches: count first, then confirm.
#[component]
fn BulkRetry(query: Memo<DeliveryQuery>, on_done: Callback<()>) -> impl IntoView {
    let preview = Action::new(|q: &DeliveryQuery| preview_bulk_retry(q.clone()));
    let run = Action::new(|(q, ack): &(DeliveryQuery, bool)| bulk_retry(q.clone(), *ack));
    let include_uncertain = RwSignal::new(false);
    let dismissed = RwSignal::new(false);
    Effect::new(move |_| {
        if run.value().get().is_some() {
            on_done.run(());
        }
    });
    // A new filter is a new question: forget the last count.
    Effect::new(move |_| {
        query.track();
        dismissed.set(true);
    });
    let confirm = move |preview: &BulkPreview| {
        let ack = include_uncertain.get();
        let count = if ack {
            preview.matching
        } else {
            preview.without_uncertain
        }
        .min(preview.cap);
        (count, ack)
    };
    view! {
        <section class="panel bulk" aria-labelledby="bulk-title" data-testid="bulk">
            <h2 id="bulk-title">"Retry everything matching these filters"</h2>
            <button type="button" class="button" data-testid="bulk-preview"
                on:click=move |_| { dismissed.set(false); include_uncertain.set(false); preview.dispatch(query.get_untracked()); }>
                "Count matching deliveries…"
            </button>
            <div role="status" aria-live="polite">
                {move || match (preview.value().get(), dismissed.get()) {
                    (Some(Ok(p)), false) => {
                        let p2 = p.clone();
                        let p3 = p.clone();
                        view! {
                            <div class="bulk-confirm" data-testid="bulk-confirm">
                                <p data-testid="bulk-count">
                                    {if p.capped { format!("More than {} retryable deliveries match.", p.cap) } else { if p.matching == 1 { "1 retryable delivery matches.".to_string() } else { format!("{} retryable deliveries match.", p.matching) } }}
                                    {(p.uncertain > 0).then(|| format!(" {} of them are uncertain.", p.uncertain))}
                                </p>
                                {p.capped.then(|| view! { <p class="alert warn">"One action retries at most " {p.cap} "; run it again for the rest."</p> })}
                                {(p.uncertain > 0).then(|| view! {
                                    <label class="ack">
                                        <input type="checkbox" data-testid="bulk-acknowledge"
                                            prop:checked=move || include_uncertain.get()
                                            on:change=move |ev| include_uncertain.set(event_target_checked(&ev)) />
                                        " Include the uncertain ones. Their receivers may already have them and cannot recognise a second copy: they may be delivered twice."
                                    </label>
                                })}
                                <p class="modal-actions">
                                    <button type="button" class="button" on:click=move |_| dismissed.set(true)>"Cancel"</button>
                                    <button type="button" class="button danger" data-testid="bulk-run"
                                        disabled=move || confirm(&p2).0 == 0 || run.pending().get()
                                        on:click=move |_| { let (_, ack) = confirm(&p); run.dispatch((query.get_untracked(), ack)); dismissed.set(true); }>
                                        {move || format!("Retry {}", confirm(&p3).0)}
                                    </button>
                                </p>
                            </div>
                        }.into_any()
                    }
                    (Some(Err(failure)), false) => view! { <p class="alert error">{failure.message}</p> }.into_any(),
                    _ => ().into_any(),
                }}
                {move || run.value().get().map(|result| match result {
                    Ok(BulkOutcome { retried, changed, capped, unavailable }) => view! {
                        <p class="alert ok" data-testid="bulk-result">
                            {format!("Retried {retried}.")}
                            {(changed > 0).then(|| format!(" {changed} had changed meanwhile and were left alone."))}
                            {capped.then_some(" More match: run it again for the rest.")}
                        </p>
                        <StoresUnavailable unavailable />
                    }.into_any(),
                    Err(Failure { message, .. }) => view! { <p class="alert error">{message}</p> }.into_any(),
                })}
            </div>
        </section>
    }
}
