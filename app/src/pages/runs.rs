//! The Runs page: every run with its deliveries counted by state, filtered by type,
//! status, delivery state, tenant and creation time, newest first, paged by keyset
//! cursor. Filters live in the URL, so a view can be bookmarked and shared;
//! after hydration they change without a full reload.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_navigate, use_query_map};
use leptos_router::NavigateOptions;

use leptos_router::components::Form;

use crate::api::{list_runs, Failure};
use crate::components::{
    focus_within, poll_while_visible, ConfigNotices, ErrorPanel, ScrollingTable, TopBar,
};
use crate::dto::{
    format_count, DeliveryCounts, DeliveryFilter, DeliveryStatus, RunPage, RunStatus, RunSummary,
};
use crate::format::{display_time, encode, short_id};

/// The filters and cursor the URL holds.
#[derive(Clone, Debug, Default, PartialEq)]
struct Filters {
    run_type: Option<String>,
    status: Option<String>,
    delivery: Option<String>,
    tenant: Option<String>,
    created_from: Option<String>,
    created_to: Option<String>,
    after: Option<String>,
}

impl Filters {
    /// The URL of this view.
    fn href(&self) -> String {
        let params: Vec<String> = [
            ("type", &self.run_type),
            ("status", &self.status),
            ("delivery", &self.delivery),
            ("tenant", &self.tenant),
            ("from", &self.created_from),
            ("to", &self.created_to),
            ("after", &self.after),
        ]
        .into_iter()
        .filter_map(|(key, value)| value.as_ref().map(|v| format!("{key}={}", encode(v))))
        .collect();
        if params.is_empty() {
            "/runs".to_string()
        } else {
            format!("/runs?{}", params.join("&"))
        }
    }

    fn with_status(&self, status: Option<&str>) -> Filters {
        Filters {
            status: status.map(str::to_string),
            after: None,
            ..self.clone()
        }
    }

    fn is_filtered(&self) -> bool {
        self.run_type.is_some()
            || self.status.is_some()
            || self.delivery.is_some()
            || self.tenant.is_some()
            || self.created_from.is_some()
            || self.created_to.is_some()
    }
}

#[component]
pub fn RunsPage() -> impl IntoView {
    let query = use_query_map();
    let filters = Memo::new(move |_| {
        query.with(|q| {
            let get = |key: &str| q.get(key).filter(|v| !v.is_empty());
            Filters {
                run_type: get("type"),
                status: get("status"),
                delivery: get("delivery"),
                tenant: get("tenant"),
                created_from: get("from"),
                created_to: get("to"),
                after: get("after"),
            }
        })
    });
    let page = Resource::new(
        move || filters.get(),
        |f| {
            list_runs(
                f.run_type,
                f.status,
                f.tenant,
                f.delivery,
                f.created_from,
                f.created_to,
                f.after,
            )
        },
    );

    // Live updates, except while someone is using the filters.
    poll_while_visible(move || !focus_within(".filters"), move || page.refetch());
    view! {
        <Title text="Runs · Herald" />
        <TopBar />
        <main id="main" tabindex="-1" class="page">
            <div class="page-head">
                <div>
                    <h1>"Runs"</h1>
                    <p class="muted">
                        "Business runs recorded through Herald, newest first, with the state of their notifications."
                    </p>
                </div>
            </div>
            <ConfigNotices />
            <Transition fallback=|| view! { <div class="panel state">"Loading runs…"</div> }>
                {move || Suspend::new(async move {
                    match page.await {
                        Ok(page) => view! { <RunsView page filters=filters.get_untracked() /> }.into_any(),
                        Err(failure) => view! { <LoadError failure filters=filters.get_untracked() /> }.into_any(),
                    }
                })}
            </Transition>
        </main>
    }
}

#[component]
fn RunsView(page: RunPage, filters: Filters) -> impl IntoView {
    let RunPage {
        runs,
        next_cursor,
        run_types,
        status_counts,
    } = page;
    let empty = runs.is_empty();
    let next_href = next_cursor.map(|cursor| {
        Filters {
            after: Some(cursor),
            ..filters.clone()
        }
        .href()
    });
    let first_href = filters.after.is_some().then(|| {
        Filters {
            after: None,
            ..filters.clone()
        }
        .href()
    });
    view! {
        <FilterBar filters=filters.clone() run_types status_counts />
        {if empty {
            view! { <EmptyState filters=filters.clone() /> }.into_any()
        } else {
            view! { <RunsTable runs /> }.into_any()
        }}
        <nav class="pager" aria-label="Pages">
            {first_href.map(|href| view! { <a href=href class="button" data-testid="first-page">"← First page"</a> })}
            {next_href.map(|href| view! { <a href=href class="button" data-testid="next-page">"Next page →"</a> })}
        </nav>
    }
}

#[component]
fn FilterBar(
    filters: Filters,
    run_types: Vec<String>,
    status_counts: Vec<(RunStatus, i64)>,
) -> impl IntoView {
    let navigate = use_navigate();
    let current_type = filters.run_type.clone().unwrap_or_default();
    let current_delivery = filters.delivery.clone().unwrap_or_default();
    let base = filters.clone();
    let nav = navigate.clone();
    let on_type = move |ev: leptos::ev::Event| {
        let value = event_target_value(&ev);
        let next = Filters {
            run_type: (!value.is_empty()).then_some(value),
            after: None,
            ..base.clone()
        };
        nav(&next.href(), NavigateOptions::default());
    };
    let base = filters.clone();
    let on_delivery = move |ev: leptos::ev::Event| {
        let value = event_target_value(&ev);
        let next = Filters {
            delivery: (!value.is_empty()).then_some(value),
            after: None,
            ..base.clone()
        };
        navigate(&next.href(), NavigateOptions::default());
    };
    let chips = std::iter::once(None)
        .chain(RunStatus::ALL.into_iter().map(Some))
        .map(|status| {
            let value = status.map(RunStatus::as_str);
            let active = filters.status.as_deref() == value;
            let label = status.map(RunStatus::label).unwrap_or("All");
            let href = filters.with_status(value).href();
            let testid = format!("status-{}", value.unwrap_or("all"));
            let count = status.and_then(|s| {
                status_counts
                    .iter()
                    .find(|(counted, _)| *counted == s)
                    .map(|(_, n)| format_count(*n))
            });
            view! {
                <a href=href class="chip" class:active=active aria-current=active.then_some("true") data-testid=testid>
                    {label}
                    {count.map(|n| view! { " " <span class="chip-count" data-testid="status-count">{n}</span> })}
                </a>
            }
        })
        .collect_view();
    let delivery_options = std::iter::once((DeliveryFilter::NEEDS_ATTENTION, "Needs attention"))
        .chain(
            DeliveryStatus::ALL
                .into_iter()
                .map(|s| (s.as_str(), s.label())),
        )
        .map(|(value, label)| {
            let selected = value == current_delivery;
            view! { <option value=value selected=selected>{label}</option> }
        })
        .collect_view();
    let hidden = |name: &'static str, value: &Option<String>| {
        value
            .clone()
            .map(|value| view! { <input type="hidden" name=name value=value /> })
    };
    view! {
        <div class="filters panel">
            <label class="field">
                <span>"Type"</span>
                <select data-testid="type-filter" on:change=on_type prop:value=current_type.clone()>
                    <option value="" selected=current_type.is_empty()>"All types"</option>
                    {run_types
                        .into_iter()
                        .map(|t| {
                            let selected = t == current_type;
                            view! { <option value=t.clone() selected=selected>{t.clone()}</option> }
                        })
                        .collect_view()}
                </select>
            </label>
            <label class="field">
                <span>"Deliveries"</span>
                <select data-testid="delivery-filter" on:change=on_delivery prop:value=current_delivery.clone()>
                    <option value="" selected=current_delivery.is_empty()>"Any state"</option>
                    {delivery_options}
                </select>
            </label>
            <div class="chips" role="group" aria-label="Status">{chips}</div>
            <Form method="GET" action="/runs">
                <div class="filter-form">
                    {hidden("type", &filters.run_type)}
                    {hidden("status", &filters.status)}
                    {hidden("delivery", &filters.delivery)}
                    <label class="field">
                        <span>"Tenant"</span>
                        <input name="tenant" data-testid="tenant-filter" size="12"
                            value=filters.tenant.clone().unwrap_or_default() />
                    </label>
                    <label class="field">
                        <span>"Created from"</span>
                        <input type="date" name="from" data-testid="from-filter"
                            value=filters.created_from.clone().unwrap_or_default() />
                    </label>
                    <label class="field">
                        <span>"to"</span>
                        <input type="date" name="to" data-testid="to-filter"
                            value=filters.created_to.clone().unwrap_or_default() />
                    </label>
                    <button type="submit" class="button" data-testid="apply-filters">"Apply"</button>
                </div>
            </Form>
        </div>
    }
}

#[component]
fn RunsTable(runs: Vec<RunSummary>) -> impl IntoView {
    view! {
        <ScrollingTable label="Runs">
            <table class="runs" data-testid="runs-table">
                <thead>
                    <tr>
                        <th>"Run"</th>
                        <th>"Type"</th>
                        <th>"Tenant"</th>
                        <th>"Status"</th>
                        <th>"Deliveries"</th>
                        <th>"Callback"</th>
                        <th>"Created"</th>
                        <th>"Updated"</th>
                    </tr>
                </thead>
                <tbody>
                    {runs.into_iter().map(|run| view! { <RunRow run /> }).collect_view()}
                </tbody>
            </table>
        </ScrollingTable>
    }
}

#[component]
fn RunRow(run: RunSummary) -> impl IntoView {
    let status = run.status.as_str();
    view! {
        <tr data-testid="run-row" data-run-id=run.id.clone()>
            <td class="mono" title=run.id.clone()>
                <a href=format!("/runs/{}", run.id) data-testid="run-link">{short_id(&run.id)}</a>
            </td>
            <td data-testid="run-type">{run.run_type}</td>
            <td>{run.tenant}</td>
            <td>
                <span class=format!("badge status-{status}") data-testid="run-status">
                    {run.status.label()}
                </span>
            </td>
            <td><DeliverySummary counts=run.deliveries /></td>
            <td class="muted">{run.callback_origin.unwrap_or_else(|| "—".into())}</td>
            <td class="time" title=run.created_at.clone()>{display_time(&run.created_at)}</td>
            <td class="time" title=run.updated_at.clone()>{display_time(&run.updated_at)}</td>
        </tr>
    }
}

/// A run's deliveries: the worst state as a badge, then the counts by state.
#[component]
fn DeliverySummary(counts: DeliveryCounts) -> impl IntoView {
    if counts.total() == 0 {
        return view! { <span class="muted" data-testid="delivery-summary">"none"</span> }
            .into_any();
    }
    let worst = counts.worst.unwrap_or(DeliveryStatus::Completed);
    let parts: Vec<(i64, &'static str, &'static str)> = vec![
        (counts.completed, "completed", "done"),
        (counts.in_flight, "in-flight", "in flight"),
        (counts.failed, "failed", "failed"),
        (counts.uncertain, "uncertain", "uncertain"),
        (counts.skipped, "skipped", "skipped"),
    ];
    let counts_view = parts
        .into_iter()
        .filter(|(n, _, _)| *n > 0)
        .map(|(n, class, label)| {
            view! {
                <span class=format!("count count-{class}") data-testid=format!("count-{class}")>
                    {n} " " {label}
                </span>
            }
        })
        .collect_view();
    view! {
        <span class="delivery-summary" data-testid="delivery-summary">
            <span class=format!("badge delivery-{}", worst.as_str()) data-testid="delivery-worst">
                {worst.label()}
            </span>
            {counts_view}
        </span>
    }
    .into_any()
}

#[component]
fn EmptyState(filters: Filters) -> impl IntoView {
    if filters.is_filtered() || filters.after.is_some() {
        view! {
            <div class="panel state" data-testid="empty-state">
                <h2>"No runs match these filters"</h2>
                <p class="muted">"Try other filters, or clear them."</p>
                <a href="/runs" class="button">"Clear filters"</a>
            </div>
        }
        .into_any()
    } else {
        view! {
            <div class="panel state" data-testid="empty-state">
                <h2>"No runs yet"</h2>
                <p class="muted">
                    "Runs appear here as your services record them with "
                    <code>"POST /api/v1/runs"</code> "."
                </p>
            </div>
        }
        .into_any()
    }
}

#[component]
fn LoadError(failure: Failure, filters: Filters) -> impl IntoView {
    let retry = filters.href();
    view! { <ErrorPanel failure what="Runs could not be loaded" retry /> }
}
