//! The Approvals page: approvals with their state, definition and target (a
//! record, or a paused run, linked to its page);
//! one approval's timeline (nodes and work items) and its prompt, alert and replay
//! events; Approve / Reject / Recall for whoever may; and the failed-replay shelf
//! with retry. The selected approval lives in the URL (`?id=`).

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use crate::api::approvals::{
    approval_detail, decision_key, list_approvals, replay_shelf, ActOnApproval, RetryReplay,
};
use crate::components::{CapabilityNotice, LongId, ScrollingTable, TopBar};
use crate::dto::{record_page, ApprovalDetailView, ApprovalEventRow, ApprovalRow, ReplayShelfView};
use crate::format::short_id;
use vocab::approvals::{field_update_state, kinds::FIELD_UPDATE, LifecycleEvent};
use vocab::DeliveryStatus;

#[component]
pub fn ApprovalsPage() -> impl IntoView {
    let query = use_query_map();
    let selected = Memo::new(move |_| query.with(|q| q.get("id").filter(|v| !v.is_empty())));
    let act = ServerAction::<ActOnApproval>::new();
    let retry = ServerAction::<RetryReplay>::new();
    let changes = move || (act.version().get(), retry.version().get());
    let list = Resource::new(changes, |_| list_approvals());
    let detail = Resource::new(
        move || (selected.get(), changes()),
        |(id, _)| async move {
            match id {
                Some(id) => approval_detail(id).await.map(Some),
                None => Ok(None),
            }
        },
    );
    let shelf = Resource::new(changes, |_| replay_shelf());
    let act_error = move || {
        act.value()
            .get()
            .and_then(|r| r.err())
            .or_else(|| retry.value().get().and_then(|r| r.err()))
            .map(|e| {
                view! { <div class="panel state error" role="alert" data-testid="action-error">{e.to_string()}</div> }
            })
    };

    view! {
        <Title text="Approvals · Herald" />
        <TopBar />
        <main id="main" tabindex="-1" class="page">
            <div class="page-head">
                <div>
                    <h1>"Approvals"</h1>
                    <p class="muted">"Approval processes over records and runs, newest first."</p>
                </div>
            </div>
            {act_error}
            <Transition fallback=|| view! { <div class="panel state">"Loading approval…"</div> }>
                {move || Suspend::new(async move {
                    match detail.await {
                        Ok(Some(detail)) => view! { <ApprovalCard detail act /> }.into_any(),
                        Ok(None) => ().into_any(),
                        Err(err) => view! { <Failed what="The approval" message=err.to_string() /> }.into_any(),
                    }
                })}
            </Transition>
            <Transition fallback=|| view! { <div class="panel state">"Loading approvals…"</div> }>
                {move || Suspend::new(async move {
                    match list.await {
                        Ok(rows) => view! { <ApprovalsTable rows /> }.into_any(),
                        Err(err) => view! { <Failed what="Approvals" message=err.to_string() /> }.into_any(),
                    }
                })}
            </Transition>
            <Transition fallback=|| ()>
                {move || Suspend::new(async move {
                    match shelf.await {
                        Ok(shelf) => view! { <Shelf shelf retry /> }.into_any(),
                        Err(err) => view! { <Failed what="The replay shelf" message=err.to_string() /> }.into_any(),
                    }
                })}
            </Transition>
        </main>
    }
}

#[component]
fn Failed(what: &'static str, message: String) -> impl IntoView {
    view! {
        <div class="panel state error" role="alert" data-testid="error-state">
            <h2>{format!("{what} could not be loaded")}</h2>
            <p>{message}</p>
        </div>
    }
}

fn badge(status: &str) -> impl IntoView {
    view! { <span class=format!("badge status-{status}") data-testid="status">{status.to_string()}</span> }
}

#[component]
fn ApprovalsTable(rows: Vec<ApprovalRow>) -> impl IntoView {
    if rows.is_empty() {
        return view! {
            <div class="panel state" data-testid="empty-state">
                <h2>"No approvals yet"</h2>
                <p class="muted">"Approvals appear here when records are submitted with "
                    <code>"POST /api/v1/approvals"</code> ", or when a run moves to "
                    <code>"awaiting_approval"</code> " with an approval."</p>
            </div>
        }
        .into_any();
    }
    view! {
        <ScrollingTable label="Approvals">
            <table class="runs" data-testid="approvals-table">
                <thead>
                    <tr>
                        <th>"Approval"</th>
                        <th>"Target"</th>
                        <th>"Definition"</th>
                        <th>"Status"</th>
                        <th>"Step"</th>
                        <th>"Submitted by"</th>
                    </tr>
                </thead>
                <tbody>
                    {rows
                        .into_iter()
                        .map(|row| {
                            let href = format!("/approvals?id={}", row.id);
                            view! {
                                <tr data-testid="approval-row" data-approval-id=row.id.clone()>
                                    <td class="mono"><a href=href>{short_id(&row.id)}</a></td>
                                    <td>{target(&row)}</td>
                                    <td>{format!("{} v{}", row.definition_id, row.definition_version)}</td>
                                    <td>{badge(&row.status)}</td>
                                    <td>{row.step}</td>
                                    <td>{row.submitted_by}</td>
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

/// What an approval approves: a run (linked to its page) or a record.
fn target(row: &ApprovalRow) -> AnyView {
    match row.run_id() {
        Some(run) => view! {
            <a class="inline-link" href=format!("/runs/{run}") data-testid="approval-target">{format!("Run {}", short_id(run))}</a>
        }
        .into_any(),
        None => view! {
            <a class="inline-link" href=record_page(&row.object, &row.record_id) data-testid="approval-target">
                {format!("{} {}", row.object, short_id(&row.record_id))}
            </a>
        }
        .into_any(),
    }
}

/// One approval: its target, state, timeline and events, with the lifecycle
/// buttons the viewer may use (the Approvals page and a run's page).
#[component]
pub fn ApprovalCard(detail: ApprovalDetailView, act: ServerAction<ActOnApproval>) -> impl IntoView {
    let ApprovalDetailView {
        approval,
        timeline,
        events,
        can_decide,
        can_recall,
    } = detail;
    let pending = approval.status == "pending";
    let approval_id = approval.id.clone();
    let step = approval.step;
    let button = move |action: &'static str, label: &'static str| {
        let id = approval_id.clone();
        let key = decision_key(&id, step, action);
        view! {
            <button
                class="button"
                data-testid=format!("{action}-button")
                disabled=move || act.pending().get()
                on:click=move |_| {
                    act.dispatch(ActOnApproval {
                        id: id.clone(),
                        action: action.to_string(),
                        key: key.clone(),
                    });
                }
            >
                {label}
            </button>
        }
    };
    view! {
        <section class="panel approval-card" data-testid="approval-detail" data-approval-id=approval.id.clone()>
            <h2>{format!("Approval {}", short_id(&approval.id))}</h2>
            <p>
                {target(&approval)}
                {format!(" · {} v{} · step {} · submitted by {}",
                    approval.definition_id, approval.definition_version, approval.step, approval.submitted_by)}
                {approval.decided_by.clone().map(|who| format!(" · decided by {who}"))}
                " " {badge(&approval.status)}
            </p>
            <div class="actions">
                {(pending && can_decide).then(|| button("approve", "Approve"))}
                {(pending && can_decide).then(|| button("reject", "Reject"))}
                {(pending && can_recall).then(|| button("recall", "Recall"))}
            </div>
            <h3>"Timeline"</h3>
            <ol data-testid="timeline">
                {timeline
                    .into_iter()
                    .map(|t| view! { <li>{t.what} " " {badge(&t.status)} {t.who.map(|w| format!(" by {w}"))}</li> })
                    .collect_view()}
            </ol>
            {events
                .iter()
                .filter(|e| e.kind == FIELD_UPDATE)
                .map(|e| view! { <FieldUpdatesLine event=e.clone() /> })
                .collect_view()}
            <h3>"Events"</h3>
            <table class="runs" data-testid="approval-events">
                <thead>
                    <tr><th>"Event"</th><th>"Kind"</th><th>"Status"</th><th>"Attempts"</th><th>"Last error"</th></tr>
                </thead>
                <tbody>
                    {events
                        .into_iter()
                        .map(|e| view! {
                            <tr data-testid="approval-event" data-kind=e.kind.clone() data-status=e.status.clone()>
                                <td><LongId id=e.event_id label="event id" /></td>
                                <td>{e.kind.clone()}</td>
                                <td>{badge(&e.status)}</td>
                                <td>{e.attempts}</td>
                                <td class="muted">{e.last_error.unwrap_or_else(|| "—".into())}</td>
                            </tr>
                        })
                        .collect_view()}
                </tbody>
            </table>
        </section>
    }
}

/// Where one transition's FieldUpdates stand: they are written by their replay
/// event after the transition answered, one at a time per record
/// (docs/ORDERING.md §5).
#[component]
fn FieldUpdatesLine(event: ApprovalEventRow) -> impl IntoView {
    let lifecycle =
        LifecycleEvent::of_replay_id(&event.event_id).map_or("this step", LifecycleEvent::as_str);
    let state = DeliveryStatus::parse(&event.status).map_or("applying", field_update_state);
    let text = match state {
        "applied" => format!("{lifecycle} field updates applied."),
        "skipped" => format!("{lifecycle} field updates were skipped by an operator; the record's later updates went on without them."),
        "blocked" => format!(
            "{lifecycle} field updates are blocked ({}); this record's later field updates wait behind them. Retry them from the failed replays below.",
            event.last_error.as_deref().unwrap_or("no error recorded")
        ),
        _ => format!("Applying {lifecycle} field updates… (written after the decision, in this record's order)"),
    };
    let class = format!("field-updates state-{state}");
    view! {
        <p class=class data-testid="field-updates" data-event-id=event.event_id.clone() data-state=state>
            {text}
        </p>
    }
}

#[component]
fn Shelf(shelf: ReplayShelfView, retry: ServerAction<RetryReplay>) -> AnyView {
    if let Some(reason) = shelf.unavailable {
        return view! { <CapabilityNotice reason /> }.into_any();
    }
    let counts = if shelf.counts.is_empty() {
        "no replays yet".to_string()
    } else {
        shelf
            .counts
            .iter()
            .map(|(status, n)| format!("{status}: {n}"))
            .collect::<Vec<_>>()
            .join(" · ")
    };
    let can_retry = shelf.can_retry;
    view! {
        <section class="panel replay-shelf" data-testid="replay-shelf">
            <h2>"Field-update replay"</h2>
            <p class="muted" data-testid="replay-counts">{counts}</p>
            {if !shelf.rows_visible {
                view! {
                    <p class="muted" data-testid="replay-rows-hidden">
                        "Failed replay rows carry record data: they are shown with the data:read permission."
                    </p>
                }.into_any()
            } else if shelf.failed.is_empty() {
                view! { <p class="muted">"No failed replays."</p> }.into_any()
            } else {
                view! {
                    <table class="runs">
                        <thead><tr><th>"Event"</th><th>"Approval"</th><th>"Attempts"</th><th>"Error"</th><th></th></tr></thead>
                        <tbody>
                            {shelf.failed.into_iter().map(|row| {
                                let (event_id, cycle) = (row.event_id.clone(), row.cycle);
                                view! {
                                    <tr data-testid="failed-replay" data-event-id=row.event_id.clone()>
                                        <td><LongId id=row.event_id.clone() label="event id" /></td>
                                        <td class="mono">{short_id(&row.approval_id)}</td>
                                        <td>{row.attempts}</td>
                                        <td class="muted">{row.last_error.unwrap_or_default()}</td>
                                        <td>{can_retry.then(|| view! {
                                            <button class="button" data-testid="retry-replay"
                                                on:click=move |_| { retry.dispatch(RetryReplay { event_id: event_id.clone(), expected_cycle: cycle }); }>
                                                "Retry"
                                            </button>
                                        })}</td>
                                    </tr>
                                }
                            }).collect_view()}
                        </tbody>
                    </table>
                }.into_any()
            }}
        </section>
    }
    .into_any()
}
