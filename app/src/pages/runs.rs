//! The Runs page: every run, filtered by type and status, newest first, paged by
//! keyset cursor. Filters live in the URL, so a view can be bookmarked and shared;
//! after hydration they change without a full reload.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_navigate, use_query_map};
use leptos_router::NavigateOptions;

use super::TopBar;
use crate::api::list_runs;
use crate::dto::{RunPage, RunStatus, RunSummary};

/// The filters and cursor the URL holds.
#[derive(Clone, Debug, Default, PartialEq)]
struct Filters {
    run_type: Option<String>,
    status: Option<String>,
    after: Option<String>,
}

impl Filters {
    /// The URL of this view.
    fn href(&self) -> String {
        let mut params = Vec::new();
        if let Some(t) = &self.run_type {
            params.push(format!("type={}", encode(t)));
        }
        if let Some(s) = &self.status {
            params.push(format!("status={}", encode(s)));
        }
        if let Some(a) = &self.after {
            params.push(format!("after={}", encode(a)));
        }
        if params.is_empty() {
            "/runs".to_string()
        } else {
            format!("/runs?{}", params.join("&"))
        }
    }

    fn with_status(&self, status: Option<&str>) -> Filters {
        Filters {
            run_type: self.run_type.clone(),
            status: status.map(str::to_string),
            after: None,
        }
    }

    fn is_filtered(&self) -> bool {
        self.run_type.is_some() || self.status.is_some()
    }
}

/// Percent-encodes a query value (types and cursors are plain ASCII, but be exact).
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
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
                after: get("after"),
            }
        })
    });
    let page = Resource::new(
        move || filters.get(),
        |f| list_runs(f.run_type, f.status, f.after),
    );

    view! {
        <Title text="Runs · Herald" />
        <TopBar />
        <main class="page">
            <div class="page-head">
                <div>
                    <h1>"Runs"</h1>
                    <p class="muted">
                        "Business runs recorded through Herald, newest first."
                    </p>
                </div>
            </div>
            <Transition fallback=|| view! { <div class="panel state">"Loading runs…"</div> }>
                {move || Suspend::new(async move {
                    match page.await {
                        Ok(page) => view! { <RunsView page filters=filters.get_untracked() /> }.into_any(),
                        Err(err) => view! { <LoadError message=err.to_string() filters=filters.get_untracked() /> }.into_any(),
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
        <FilterBar filters=filters.clone() run_types />
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
fn FilterBar(filters: Filters, run_types: Vec<String>) -> impl IntoView {
    let navigate = use_navigate();
    let current_type = filters.run_type.clone().unwrap_or_default();
    let base = filters.clone();
    let on_type = move |ev: leptos::ev::Event| {
        let value = event_target_value(&ev);
        let next = Filters {
            run_type: (!value.is_empty()).then_some(value),
            status: base.status.clone(),
            after: None,
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
            view! {
                <a href=href class="chip" class:active=active aria-current=active.then_some("true") data-testid=testid>
                    {label}
                </a>
            }
        })
        .collect_view();
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
            <div class="chips" role="group" aria-label="Status">{chips}</div>
        </div>
    }
}

#[component]
fn RunsTable(runs: Vec<RunSummary>) -> impl IntoView {
    view! {
        <div class="panel table-wrap">
            <table class="runs" data-testid="runs-table">
                <thead>
                    <tr>
                        <th>"Run"</th>
                        <th>"Type"</th>
                        <th>"Tenant"</th>
                        <th>"Status"</th>
                        <th>"Callback"</th>
                        <th>"Created"</th>
                        <th>"Updated"</th>
                    </tr>
                </thead>
                <tbody>
                    {runs.into_iter().map(|run| view! { <RunRow run /> }).collect_view()}
                </tbody>
            </table>
        </div>
    }
}

#[component]
fn RunRow(run: RunSummary) -> impl IntoView {
    let status = run.status.as_str();
    view! {
        <tr data-testid="run-row" data-run-id=run.id.clone()>
            <td class="mono" title=run.id.clone()>{short_id(&run.id)}</td>
            <td data-testid="run-type">{run.run_type}</td>
            <td>{run.tenant}</td>
            <td>
                <span class=format!("badge status-{status}") data-testid="run-status">
                    {run.status.label()}
                </span>
            </td>
            <td class="muted">{run.callback_origin.unwrap_or_else(|| "—".into())}</td>
            <td class="time" title=run.created_at.clone()>{display_time(&run.created_at)}</td>
            <td class="time" title=run.updated_at.clone()>{display_time(&run.updated_at)}</td>
        </tr>
    }
}

/// `2026-11-30T10:36:47.021Z` as `2026-11-30 10:36:47 UTC`: seconds are enough at a glance;
/// the full time is in the cell's title.
fn display_time(rfc3339: &str) -> String {
    let trimmed = rfc3339.split(['.', 'Z']).next().unwrap_or(rfc3339);
    format!("{} UTC", trimmed.replace('T', " "))
}

/// The last 12 characters of an id: the part of a UUIDv7 that differs between runs.
fn short_id(id: &str) -> String {
    let start = id.len().saturating_sub(12);
    format!("…{}", &id[start..])
}

#[component]
fn EmptyState(filters: Filters) -> impl IntoView {
    if filters.is_filtered() || filters.after.is_some() {
        view! {
            <div class="panel state" data-testid="empty-state">
                <h2>"No runs match these filters"</h2>
                <p class="muted">"Try another type or status, or clear the filters."</p>
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
fn LoadError(message: String, filters: Filters) -> impl IntoView {
    view! {
        <div class="panel state error" role="alert" data-testid="error-state">
            <h2>"Runs could not be loaded"</h2>
            <p>{message}</p>
            <a href=filters.href() rel="external" class="button">"Try again"</a>
        </div>
    }
}
