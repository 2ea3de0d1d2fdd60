//! Records (issue 23, item 7): the business data approvals act on, by object,
//! newest first with keyset pages; a record's fields and its approval history
//! (each approval with its events, the field updates it owes among them).
//! Records are read-only here, for anyone with `records:read`; an approval shown
//! here can be decided as on the Approvals page, by whoever may.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use crate::api::approvals::ActOnApproval;
use crate::api::records::{get_record, list_records};
use crate::api::Failure;
use crate::components::{set_status, ErrorPanel, ScrollingTable, TopBar};
use crate::dto::{record_page, RecordDetail, RecordField, RecordRow, RecordsPage as Page};
use crate::format::{display_time, encode, short_id};
use crate::pages::approvals::ApprovalCard;

/// Fields a row of the listing shows, and the characters of their preview.
const PREVIEW_FIELDS: usize = 3;
const PREVIEW_CHARS: usize = 80;

#[component]
pub fn RecordsPage() -> impl IntoView {
    let query = use_query_map();
    let param = move |name: &'static str| {
        Memo::new(move |_| query.with(|q| q.get(name).filter(|v| !v.is_empty())))
    };
    let (object, before, id) = (param("object"), param("before"), param("id"));
    let page = Resource::new(
        move || (object.get(), before.get()),
        |(o, b)| list_records(o, b),
    );
    view! {
        <Title text="Records · Herald" />
        <TopBar />
        <main id="main" tabindex="-1" class="page">
            <div class="page-head">
                <div>
                    <h1>"Records"</h1>
                    <p class="muted">"The business data approvals act on, by object, newest first. Records change through the API and their approvals; an approval shown here can be decided as on the Approvals page."</p>
                </div>
            </div>
            {move || id.get().map(|id| view! { <RecordPanel object=object.get().unwrap_or_default() id /> })}
            <Transition fallback=|| view! { <div class="panel state">"Loading records…"</div> }>
                {move || Suspend::new(async move {
                    match page.await {
                        Ok(page) => view! { <Listing page /> }.into_any(),
                        Err(failure) => view! {
                            <ErrorPanel failure what="Records could not be loaded" retry="/records".to_string() />
                        }
                        .into_any(),
                    }
                })}
            </Transition>
        </main>
    }
}

#[component]
fn Listing(page: Page) -> impl IntoView {
    let Some(object) = page.object.clone() else {
        return view! {
            <div class="panel state" data-testid="records-none">
                <h2>"No records to show"</h2>
                <p class="muted">"Records appear here for the objects approval definitions act on. Create one with "
                    <code>"POST /api/v1/records/{object}"</code> "."</p>
            </div>
        }
        .into_any();
    };
    let chips = page
        .objects
        .iter()
        .map(|o| {
            let current = (*o == object).then_some("page");
            view! { <a class="chip" href=format!("/records?object={}", encode(o)) aria-current=current>{o.clone()}</a> }
        })
        .collect_view();
    let next = page.next_cursor.map(|cursor| {
        format!(
            "/records?object={}&before={}",
            encode(&object),
            encode(&cursor)
        )
    });
    let newest = page
        .paged
        .then(|| format!("/records?object={}", encode(&object)));
    let body = if page.records.is_empty() {
        view! {
            <div class="panel state" data-testid="records-empty">
                <h2>{format!("No {object} records yet")}</h2>
                <p class="muted">"They appear here as they are created through the API."</p>
            </div>
        }
        .into_any()
    } else {
        view! {
            <ScrollingTable label="Records">
                <table class="runs" data-testid="records-table">
                    <thead>
                        <tr>
                            <th>"Record"</th>
                            <th>"Version"</th>
                            <th>"Updated"</th>
                            <th>"Fields"</th>
                        </tr>
                    </thead>
                    <tbody>
                        {page.records.into_iter().map(|r| view! { <RecordLine record=r /> }).collect_view()}
                    </tbody>
                </table>
            </ScrollingTable>
        }
        .into_any()
    };
    view! {
        <nav class="chips objects" aria-label="Objects">{chips}</nav>
        {body}
        <nav class="pager" aria-label="Pages">
            {newest.map(|href| view! { <a href=href class="button" data-testid="records-newest">"← Newest"</a> })}
            {next.map(|href| view! { <a href=href class="button" data-testid="records-older">"Older records →"</a> })}
        </nav>
    }
    .into_any()
}

/// A few of a record's fields, cut to a line.
fn preview(fields: &[RecordField]) -> String {
    let text = fields
        .iter()
        .take(PREVIEW_FIELDS)
        .map(|f| format!("{}: {}", f.name, f.value))
        .collect::<Vec<_>>()
        .join(", ");
    let more = fields.len() > PREVIEW_FIELDS;
    match text.char_indices().nth(PREVIEW_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None if more => format!("{text}, …"),
        None => text,
    }
}

#[component]
fn RecordLine(record: RecordRow) -> impl IntoView {
    let href = record_page(&record.object, &record.id);
    view! {
        <tr data-testid="record-row" data-record-id=record.id.clone()>
            <td><a class="mono" href=href title=record.id.clone()>{short_id(&record.id)}</a></td>
            <td>{record.version}</td>
            <td class="time" title=record.updated_at.clone()>{display_time(&record.updated_at)}</td>
            <td class="wrap mono small" data-testid="record-preview">{preview(&record.fields)}</td>
        </tr>
    }
}

/// The record the page was opened on: its fields and its approvals.
#[component]
fn RecordPanel(object: String, id: String) -> impl IntoView {
    let act = ServerAction::<ActOnApproval>::new();
    let (for_load, for_missing) = ((object, id.clone()), id);
    let detail = Resource::new(
        move || (for_load.clone(), act.version().get()),
        |((object, id), _)| get_record(object, id),
    );
    view! {
        <Transition fallback=|| view! { <div class="panel state">"Loading the record…"</div> }>
            {move || {
                let missing = for_missing.clone();
                Suspend::new(async move {
                    match detail.await {
                        Ok(detail) => view! { <RecordCard detail act /> }.into_any(),
                        Err(Failure { status: 404, .. }) => {
                            set_status(404);
                            view! {
                                <Title text="Record not found · Herald" />
                                <div class="panel state" data-testid="record-not-found">
                                    <p class="state-code">"404"</p>
                                    <h2>"Record not found"</h2>
                                    <p class="muted">"No record of this object has the id " <code>{missing}</code> "."</p>
                                </div>
                            }
                            .into_any()
                        }
                        Err(failure) => view! {
                            <ErrorPanel failure what="The record could not be loaded" retry="/records".to_string() />
                        }
                        .into_any(),
                    }
                })
            }}
        </Transition>
    }
}

#[component]
fn RecordCard(detail: RecordDetail, act: ServerAction<ActOnApproval>) -> impl IntoView {
    let RecordDetail { record, approvals } = detail;
    let act_error = move || {
        act.value().get().and_then(|r| r.err()).map(|failure| {
            view! { <p class="alert error" role="alert">"Not done: " {failure.message}</p> }
        })
    };
    view! {
        <Title text=format!("Record {} · Herald", short_id(&record.id)) />
        <section class="panel record-detail" aria-labelledby="record-title" data-testid="record-detail">
            <h2 id="record-title">{format!("{} ", record.object)} <span class="mono">{record.id.clone()}</span></h2>
            <p class="muted">{format!("Version {} · updated {}", record.version, display_time(&record.updated_at))}</p>
            <dl class="record-fields" data-testid="record-fields">
                {record.fields.into_iter().map(|f| view! {
                    <dt>{f.name}</dt>
                    <dd class="mono">{f.value}</dd>
                }).collect_view()}
            </dl>
        </section>
        <section class="record-approvals" aria-labelledby="record-approvals-title" data-testid="record-approvals">
            <h2 id="record-approvals-title">"Approvals"</h2>
            {act_error}
            {if approvals.is_empty() {
                view! { <p class="muted" data-testid="record-no-approvals">"No approval has been asked for this record."</p> }.into_any()
            } else {
                approvals
                    .into_iter()
                    .map(|detail| view! { <ApprovalCard detail act /> })
                    .collect_view()
                    .into_any()
            }}
        </section>
    }
}
