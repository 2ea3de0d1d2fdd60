//! Find by id: the header's search box lands here. One match opens its page
//! straight away (a redirect when the page is served, a navigation in the app);
//! several are listed; none, or text too short to search, each has its own state.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use crate::api::find_by_id;
use crate::components::{set_status, ErrorPanel, ScrollingTable, StoresUnavailable, TopBar};
use crate::dto::search::MIN_SEARCH_LEN;
use crate::dto::SearchAnswer;

#[component]
pub fn SearchPage() -> impl IntoView {
    let query = use_query_map();
    let q = Memo::new(move |_| query.with(|m| m.get("q").unwrap_or_default()));
    let answer = Resource::new(
        move || q.get(),
        |q| async move {
            if q.trim().is_empty() {
                Ok(None)
            } else {
                find_by_id(q).await.map(Some)
            }
        },
    );
    view! {
        <Title text="Find by id · Herald" />
        <TopBar />
        <main id="main" tabindex="-1" class="page">
            <div class="page-head">
                <div>
                    <h1>"Find by id"</h1>
                    <p class="muted">
                        {format!("A run, delivery, approval or record id: whole, or at least {MIN_SEARCH_LEN} characters of its beginning or its end.")}
                    </p>
                </div>
            </div>
            <Transition fallback=|| view! { <div class="panel state">"Searching…"</div> }>
                {move || Suspend::new(async move {
                    match answer.await {
                        Ok(None) => view! {
                            <div class="panel state" data-testid="search-prompt">
                                <h2>"Paste an id"</h2>
                                <p class="muted">"Type or paste it into the box at the top of any page (press / to get there), then Enter."</p>
                            </div>
                        }
                        .into_any(),
                        Ok(Some(answer)) => view! { <Results answer /> }.into_any(),
                        Err(failure) if failure.status == 400 => {
                            set_status(400);
                            view! {
                            <div class="panel state refusal" role="alert" data-testid="search-refused">
                                <h2>"That cannot be searched"</h2>
                                <p>{failure.message}</p>
                            </div>
                        }
                        .into_any()
                        }
                        Err(failure) => view! {
                            <ErrorPanel failure what="The search failed" retry=format!("/search?q={}", q.get_untracked()) />
                        }
                        .into_any(),
                    }
                })}
            </Transition>
        </main>
    }
}

/// Opens `href` in place of this page.
fn open(href: &str) {
    #[cfg(feature = "ssr")]
    leptos_axum::redirect(href);
    #[cfg(not(feature = "ssr"))]
    leptos_router::hooks::use_navigate()(
        href,
        leptos_router::NavigateOptions {
            replace: true,
            ..Default::default()
        },
    );
}

#[component]
fn Results(answer: SearchAnswer) -> impl IntoView {
    let unavailable = answer.unavailable.clone();
    if let Some(href) = answer.only().map(str::to_string) {
        open(&href);
        return view! {
            <div class="panel state" data-testid="search-opening">
                <h2>"Found it"</h2>
                <p><a href=href.clone()>{format!("Open {href}")}</a></p>
            </div>
        }
        .into_any();
    }
    if answer.found.is_empty() {
        return view! {
            <StoresUnavailable unavailable />
            <div class="panel state" data-testid="search-empty">
                <h2>{format!("Nothing has the id “{}”", answer.query)}</h2>
                <p class="muted">"No run, delivery, approval or record has it, or begins or ends with it. Deliveries removed by retention are no longer here."</p>
            </div>
        }
        .into_any();
    }
    let count = answer.found.len();
    let more = answer.more.then(|| {
        view! {
            <p class="alert warn" data-testid="search-more">
                "More ids match than are listed here: paste more of the id to narrow it."
            </p>
        }
    });
    view! {
        <StoresUnavailable unavailable />
        <p class="muted" data-testid="search-count">{format!("{count} matches for “{}”", answer.query)}</p>
        {more}
        <ScrollingTable label="Matches">
            <table class="runs" data-testid="search-results">
                <thead>
                    <tr>
                        <th>"What"</th>
                        <th>"Id"</th>
                        <th>"Of"</th>
                        <th>"Open"</th>
                    </tr>
                </thead>
                <tbody>
                    {answer
                        .found
                        .into_iter()
                        .map(|found| {
                            let label = found.kind.label();
                            let row_id = found.id.clone();
                            view! {
                                <tr data-testid="search-row" data-id=row_id data-kind=label>
                                    <td>{label}{found.exact.then_some(" (exact)")}</td>
                                    <td class="mono wrap">{found.id}</td>
                                    <td class="wrap">{found.context}</td>
                                    <td>
                                        {match found.opens {
                                            Some(href) => view! { <a href=href>"Open"</a> }.into_any(),
                                            None => view! { <span class="muted">"no page yet"</span> }.into_any(),
                                        }}
                                    </td>
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
        </ScrollingTable>
    }
    .into_any()
}
