//! The overview (issue 23, item 1), the page after sign-in: how delivery went
//! over the last hour or day, per source and kind, from the store's per-minute
//! rollups: deliveries completed, failed and uncertain, commit → delivery
//! latency, the backlog, and the destinations that need attention.

mod charts;

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::components::Form;
use leptos_router::hooks::use_query_map;

use crate::api::{destination_breakers, load_overview};
use crate::components::{poll_while_visible, ErrorPanel, StoresUnavailable, TopBar};
use crate::dto::{
    BreakerView, OverviewQuery, OverviewView, OverviewWindow, NO_DESTINATION, OTHER_DESTINATIONS,
};
use crate::format::encode;
use charts::{format_duration, group_digits, Chart, Series, Shape, Unit};

#[component]
pub fn OverviewPage() -> impl IntoView {
    let params = use_query_map();
    let query = Memo::new(move |_| {
        params.with(|q| {
            let get = |name: &str| q.get(name).filter(|v| !v.is_empty());
            OverviewQuery {
                window: get("window")
                    .and_then(|w| OverviewWindow::parse(&w))
                    .unwrap_or_default(),
                source: get("source"),
                kind: get("kind"),
            }
        })
    });
    let overview = Resource::new(move || query.get(), load_overview);
    let breakers = Resource::new(|| (), |_| destination_breakers());
    poll_while_visible(
        || !crate::components::focus_within(".filters"),
        move || {
            overview.refetch();
            breakers.refetch();
        },
    );
    view! {
        <Title text="Overview · Herald" />
        <TopBar />
        <main id="main" tabindex="-1" class="page">
            <div class="page-head">
                <div>
                    <h1>"Overview"</h1>
                    <p class="muted">"How delivery went, counted each minute from the deliveries that settled. Times are UTC."</p>
                </div>
            </div>
            <Transition fallback=|| view! { <div class="panel state">"Loading the overview…"</div> }>
                {move || Suspend::new(async move {
                    match overview.await {
                        Ok(view) => view! { <Figures view breakers /> }.into_any(),
                        Err(failure) => view! {
                            <ErrorPanel failure what="The overview could not be loaded" retry="/overview".to_string() />
                        }
                        .into_any(),
                    }
                })}
            </Transition>
        </main>
    }
}

/// The window chips and the source and kind filters.
#[component]
fn Controls(view: OverviewView) -> impl IntoView {
    let query = view.query.clone();
    let link = move |window: OverviewWindow| {
        let mut href = format!("/overview?window={}", window.as_str());
        if let Some(source) = &query.source {
            href.push_str(&format!("&source={}", encode(source)));
        }
        if let Some(kind) = &query.kind {
            href.push_str(&format!("&kind={}", encode(kind)));
        }
        href
    };
    let chip = |window: OverviewWindow, label: &'static str| {
        let current = (view.query.window == window).then_some("page");
        view! { <a class="chip" href=link(window) aria-current=current data-testid=format!("window-{}", window.as_str())>{label}</a> }
    };
    view! {
        <div class="overview-controls">
            <nav class="chips" aria-label="Window">
                {chip(OverviewWindow::Hour, "Last hour")}
                {chip(OverviewWindow::Day, "Last day")}
            </nav>
            <Form method="GET" action="/overview" attr:class="filters">
                <input type="hidden" name="window" value=view.query.window.as_str() />
                {choice("Source", "source", "All sources", &view.sources, &view.query.source)}
                {choice("Kind", "kind", "All kinds", &view.kinds, &view.query.kind)}
                <button type="submit" class="button">"Show"</button>
            </Form>
        </div>
    }
}

/// A filter's select: every value the window holds, and "all" for none.
fn choice(
    label: &'static str,
    name: &'static str,
    all: &'static str,
    values: &[String],
    chosen: &Option<String>,
) -> impl IntoView {
    // A value chosen that the window does not hold still shows as chosen (and
    // stays chosen when the form is sent again).
    let missing = chosen.as_ref().filter(|c| !values.contains(c)).cloned();
    let options = values
        .iter()
        .chain(missing.iter())
        .map(|value| {
            let selected = chosen.as_ref() == Some(value);
            view! { <option value=value.clone() selected=selected>{value.clone()}</option> }
        })
        .collect_view();
    view! {
        <label>
            {label}
            <select name=name data-testid=format!("overview-{name}")>
                <option value="">{all}</option>
                {options}
            </select>
        </label>
    }
}

/// One figure with its name.
fn stat(id: &'static str, label: &'static str, value: String) -> impl IntoView {
    view! {
        <div class="stat" data-testid=format!("stat-{id}")>
            <span class="stat-label">{label}</span>
            <strong class="stat-value">{value}</strong>
        </div>
    }
}

#[component]
fn Figures(
    view: OverviewView,
    breakers: Resource<Result<crate::dto::BreakerList, crate::api::Failure>>,
) -> impl IntoView {
    let span = match view.query.window {
        OverviewWindow::Hour => "the last hour",
        OverviewWindow::Day => "the last day",
    };
    let quiet = view.completed + view.failed + view.uncertain + view.skipped == 0
        && view.points.iter().all(|p| p.backlog == 0);
    if quiet {
        let counted = match &view.as_of {
            Some(at) => {
                format!("Counted at {at} UTC: no delivery settled in {span} and none is waiting.")
            }
            None => {
                "Not counted yet: the overview fills in within seconds of Herald's start.".into()
            }
        };
        return view! {
            <Controls view=view.clone() />
            <StoresUnavailable unavailable=view.unavailable.clone() />
            <div class="panel state" data-testid="overview-empty">
                <h2>{format!("Nothing to show for {span}")}</h2>
                <p class="muted">{counted}</p>
                <p class="muted">"Deliveries appear here as they settle: record a run with a callback through the API (POST /api/v1/runs) to see one."</p>
            </div>
        }
        .into_any();
    }
    let dash = || "—".to_string();
    let as_of = view
        .as_of
        .clone()
        .map(|t| format!("Counted at {t} UTC."))
        .unwrap_or_else(|| "Not recounted lately: the figures may be behind.".into());
    let labels: Vec<String> = view.points.iter().map(|p| p.label.clone()).collect();
    let count_of = |f: fn(&crate::dto::OverviewPoint) -> i64| -> Vec<Option<i64>> {
        view.points.iter().map(|p| Some(f(p))).collect()
    };
    let deliveries = vec![
        Series {
            name: "Completed",
            class: "series-ok",
            values: count_of(|p| p.completed),
        },
        Series {
            name: "Failed",
            class: "series-bad",
            values: count_of(|p| p.failed),
        },
        Series {
            name: "Uncertain",
            class: "series-warn",
            values: count_of(|p| p.uncertain),
        },
    ];
    let latency = vec![
        Series {
            name: "p50",
            class: "series-info",
            values: view.points.iter().map(|p| p.p50_ms).collect(),
        },
        Series {
            name: "p99",
            class: "series-brand",
            values: view.points.iter().map(|p| p.p99_ms).collect(),
        },
    ];
    let backlog = vec![Series {
        name: "Pending and in flight",
        class: "series-idle",
        values: count_of(|p| p.backlog),
    }];
    let per = match view.query.window {
        OverviewWindow::Hour => "per minute",
        OverviewWindow::Day => "per quarter hour",
    };
    let deliveries_summary = format!(
        "In {span}: {} completed, {} failed and {} uncertain deliveries, {per}.",
        group_digits(view.completed),
        group_digits(view.failed),
        group_digits(view.uncertain)
    );
    let latency_summary = format!(
        "Commit to delivery in {span}: p50 {}, p99 {}, {per}.",
        view.p50_ms.map(format_duration).unwrap_or_else(dash),
        view.p99_ms.map(format_duration).unwrap_or_else(dash)
    );
    let backlog_summary = format!(
        "Deliveries waiting, the most seen {per}; {} now.",
        group_digits(view.backlog)
    );
    view! {
        <Controls view=view.clone() />
        <StoresUnavailable unavailable=view.unavailable.clone() />
        <p class="muted as-of" data-testid="overview-as-of">{as_of}</p>
        <section class="stats" aria-label="Figures">
            {stat("completed", "Completed", group_digits(view.completed))}
            {stat("failed", "Failed", group_digits(view.failed))}
            {stat("uncertain", "Uncertain", group_digits(view.uncertain))}
            {stat("p50", "Latency p50", view.p50_ms.map(format_duration).unwrap_or_else(dash))}
            {stat("p99", "Latency p99", view.p99_ms.map(format_duration).unwrap_or_else(dash))}
            {stat("backlog", "Backlog", group_digits(view.backlog))}
            {stat("oldest", "Oldest waiting", view.oldest_pending_ms.map(format_duration).unwrap_or_else(dash))}
        </section>
        <div class="charts">
            <Chart id="chart-deliveries" title="Deliveries" summary=deliveries_summary labels=labels.clone() series=deliveries shape=Shape::StackedBars unit=Unit::Count />
            <Chart id="chart-latency" title="Commit → delivery latency" summary=latency_summary labels=labels.clone() series=latency shape=Shape::Lines unit=Unit::Millis />
            <Chart id="chart-backlog" title="Backlog" summary=backlog_summary labels series=backlog shape=Shape::StackedBars unit=Unit::Count />
        </div>
        <Destinations view breakers />
    }
    .into_any()
}

/// Destinations with an open (or probing) breaker, then those with the most
/// failed and uncertain deliveries in the window.
#[component]
fn Destinations(
    view: OverviewView,
    breakers: Resource<Result<crate::dto::BreakerList, crate::api::Failure>>,
) -> impl IntoView {
    view! {
        <section class="panel destinations" aria-labelledby="destinations-title" data-testid="overview-destinations">
            <h2 id="destinations-title">"Destinations needing attention"</h2>
            <Transition fallback=|| ()>
                {move || {
                    let failing = view.destinations.clone();
                    Suspend::new(async move {
                        // A store without breakers (or a viewer refused them) shows failures only.
                        let open: Vec<BreakerView> = breakers
                            .await
                            .map(|list| list.breakers)
                            .unwrap_or_default()
                            .into_iter()
                            .filter(|b| b.state != "closed")
                            .collect();
                        destination_rows(open, failing)
                    })
                }}
            </Transition>
        </section>
    }
}

fn destination_rows(
    open: Vec<BreakerView>,
    failing: Vec<crate::dto::DestinationFailures>,
) -> AnyView {
    if open.is_empty() && failing.is_empty() {
        return view! {
            <p class="muted" data-testid="destinations-none">"No breaker is open and no delivery failed in this window."</p>
        }
        .into_any();
    }
    let failures_of = |destination: &str| {
        failing
            .iter()
            .find(|f| f.destination == destination)
            .map(|f| (f.failed, f.uncertain))
            .unwrap_or_default()
    };
    let mut rows: Vec<(String, String, i64, i64)> = open
        .iter()
        .map(|b| {
            let (failed, uncertain) = failures_of(&b.destination);
            let state = if b.state == "half_open" {
                "probing"
            } else {
                "open"
            };
            (
                b.destination.clone(),
                format!("breaker {state}"),
                failed,
                uncertain,
            )
        })
        .collect();
    for f in &failing {
        if !rows.iter().any(|r| r.0 == f.destination) {
            rows.push((
                f.destination.clone(),
                "breaker closed".into(),
                f.failed,
                f.uncertain,
            ));
        }
    }
    let body = rows
        .into_iter()
        .map(|(destination, state, failed, uncertain)| {
            let cell = match destination.as_str() {
                // The failures of the destinations past those kept apart each minute.
                OTHER_DESTINATIONS => view! { <span>"(other destinations)"</span> }.into_any(),
                _ => {
                    let href = format!("/deliveries?destination={}", encode(&destination));
                    let name = if destination == NO_DESTINATION {
                        "(no destination)".to_string()
                    } else {
                        destination
                    };
                    view! { <a href=href>{name}</a> }.into_any()
                }
            };
            view! {
                <tr data-testid="destination-row">
                    <td>{cell}</td>
                    <td>{state}</td>
                    <td class="num">{group_digits(failed)}</td>
                    <td class="num">{group_digits(uncertain)}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <table class="runs">
            <thead>
                <tr>
                    <th scope="col">"Destination"</th>
                    <th scope="col">"Breaker"</th>
                    <th scope="col">"Failed"</th>
                    <th scope="col">"Uncertain"</th>
                </tr>
            </thead>
            <tbody>{body}</tbody>
        </table>
    }
    .into_any()
}
