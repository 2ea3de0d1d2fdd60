//! The Deliveries page's panel of blocked ordered lanes (issue 22, docs/ORDERING.md
//! §6): a lane whose head failed or is uncertain holds every delivery behind it
//! until an operator retries the head or skips it with a reason. Both are
//! confirmed first, sent from the state and cycle the operator saw, and audited.

use leptos::prelude::*;

use crate::api::{list_blocked_lanes, retry_delivery, skip_delivery, Failure};
use crate::components::{poll_while_visible, LongId, ScrollingTable, StoresUnavailable};
use crate::dto::{
    BlockedLaneView, BlockedLanes, DeliveryStatus, RetryCommand, SkipCommand, MAX_SKIP_REASON,
};
use crate::format::display_time;

/// What an operator asked of a head, confirmed.
#[derive(Clone)]
enum HeadAction {
    Retry(RetryCommand),
    Skip(String, SkipCommand),
}

/// The confirmation open under one lane: which head, and whether to retry or skip.
#[derive(Clone, PartialEq)]
struct Confirming {
    event_id: String,
    skip: bool,
}

#[component]
pub fn BlockedLanesPanel() -> impl IntoView {
    let lanes = Resource::new(|| (), |_| list_blocked_lanes());
    let act = Action::new(|action: &HeadAction| {
        let action = action.clone();
        async move {
            match action {
                HeadAction::Retry(command) => retry_delivery(command).await.map(|_| {
                    "Retried: the head is pending again, and its lane waits for it.".to_string()
                }),
                HeadAction::Skip(event_id, command) => skip_delivery(event_id, command)
                    .await
                    .map(|_| "Skipped: the lane goes on with its next delivery.".to_string()),
            }
        }
    });
    let confirming = RwSignal::new(None::<Confirming>);
    Effect::new(move |_| {
        if act.value().get().is_some() {
            lanes.refetch();
        }
    });
    // Not while an operator is writing a reason.
    poll_while_visible(
        move || confirming.get_untracked().is_none(),
        move || lanes.refetch(),
    );
    view! {
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                match lanes.await {
                    Ok(list) => view! { <LanesList list confirming act /> }.into_any(),
                    // No durable outbox (501): the page below says so once.
                    Err(failure) if failure.status == 501 => ().into_any(),
                    Err(failure) => view! {
                        <p class="muted small" role="status" data-testid="blocked-lanes-error">
                            "Blocked lanes could not be read: " {failure.message}
                        </p>
                    }.into_any(),
                }
            })}
        </Transition>
    }
}

#[component]
fn LanesList(
    list: BlockedLanes,
    confirming: RwSignal<Option<Confirming>>,
    act: Action<HeadAction, Result<String, Failure>>,
) -> impl IntoView {
    let BlockedLanes {
        lanes,
        open_lanes,
        more,
        unavailable,
    } = list;
    // Nothing ordered in flight, and every store read: no panel at all.
    if lanes.is_empty() && open_lanes == 0 && unavailable.is_empty() {
        return ().into_any();
    }
    let outcome = move || {
        act.value().get().map(|result| match result {
            Ok(message) => view! { <p class="alert ok" data-testid="lane-action-result">{message}</p> }.into_any(),
            Err(failure) => view! { <p class="alert error" data-testid="lane-action-error">{failure.message}</p> }.into_any(),
        })
    };
    let body = if lanes.is_empty() {
        let flowing = match open_lanes {
            1 => "1 ordered lane is flowing.".to_string(),
            n => format!("{n} ordered lanes are flowing."),
        };
        view! {
            <p class="muted" data-testid="blocked-lanes-empty">"No lane is blocked. " {flowing}</p>
        }
        .into_any()
    } else {
        view! {
            <p class="muted">"Each lane delivers one at a time, in commit order. Its head failed or is uncertain, so nothing behind it moves until you retry the head or skip it."</p>
            <ScrollingTable label="Lane heads">
                <table class="runs" data-testid="blocked-lanes-table">
                    <thead>
                        <tr>
                            <th>"Lane"</th>
                            <th>"Head"</th>
                            <th>"State"</th>
                            <th>"Why"</th>
                            <th>"Waiting"</th>
                            <th>"Blocked since"</th>
                            <th><span class="visually-hidden">"Actions"</span></th>
                        </tr>
                    </thead>
                    <tbody>
                        {lanes.into_iter().map(|lane| view! { <LaneRow lane confirming act /> }).collect_view()}
                    </tbody>
                </table>
            </ScrollingTable>
            {more.then(|| view! { <p class="muted small">"More lanes are blocked than these 50 longest blocked; unblock these first, and the rest will show."</p> })}
        }
        .into_any()
    };
    view! {
        <section class="panel blocked-lanes" aria-labelledby="blocked-lanes-title" data-testid="blocked-lanes">
            <h2 id="blocked-lanes-title">"Blocked lanes"</h2>
            <StoresUnavailable unavailable />
            {body}
            <div role="status" aria-live="polite">{outcome}</div>
        </section>
    }
    .into_any()
}

#[component]
fn LaneRow(
    lane: BlockedLaneView,
    confirming: RwSignal<Option<Confirming>>,
    act: Action<HeadAction, Result<String, Failure>>,
) -> impl IntoView {
    let head = lane.head.clone();
    let status = head.status.as_str();
    let event_id = head.event_id.clone();
    let open = {
        let event_id = event_id.clone();
        move |skip: bool| {
            confirming.get()
                == Some(Confirming {
                    event_id: event_id.clone(),
                    skip,
                })
        }
    };
    let ask = {
        let event_id = event_id.clone();
        move |skip: bool| {
            confirming.set(Some(Confirming {
                event_id: event_id.clone(),
                skip,
            }))
        }
    };
    let actions = lane.can_act.then(|| {
        let (ask_retry, ask_skip) = (ask.clone(), ask.clone());
        view! {
            <button type="button" class="button" data-testid="lane-retry"
                disabled=move || act.pending().get() on:click=move |_| ask_retry(false)>"Retry head…"</button>
            " "
            <button type="button" class="button" data-testid="lane-skip"
                disabled=move || act.pending().get() on:click=move |_| ask_skip(true)>"Skip head…"</button>
        }
    });
    let confirm_row = {
        let lane = lane.clone();
        let open = open.clone();
        move || {
            let skip = if open(true) {
                true
            } else if open(false) {
                false
            } else {
                return None;
            };
            Some(view! {
                <tr class="lane-confirm">
                    <td colspan="7"><HeadConfirm lane=lane.clone() skip confirming act /></td>
                </tr>
            })
        }
    };
    view! {
        <tr data-testid="blocked-lane" data-lane=lane.lane.clone() data-event-id=event_id.clone()>
            <td class="mono wrap" data-testid="lane-key">{lane.lane.clone()}</td>
            <td>
                <LongId id=event_id.clone() label="head event id" />
                <div class="muted small">{head.kind.clone()}</div>
            </td>
            <td><span class=format!("badge delivery-{status}") data-testid="lane-head-status">{head.status.label()}</span></td>
            <td class="error-text wrap">{head.last_error.clone().unwrap_or_else(|| "—".into())}</td>
            <td data-testid="lane-waiting">{lane.waiting}</td>
            <td class="time" title=head.updated_at.clone()>{display_time(&head.updated_at)}</td>
            <td class="nowrap">{actions}</td>
        </tr>
        {confirm_row}
    }
}

/// The confirmation of a retry or skip of one head: what it does to the lane, the
/// reason a skip needs, and the acknowledgement an uncertain head needs.
#[component]
fn HeadConfirm(
    lane: BlockedLaneView,
    skip: bool,
    confirming: RwSignal<Option<Confirming>>,
    act: Action<HeadAction, Result<String, Failure>>,
) -> impl IntoView {
    let head = lane.head.clone();
    let uncertain = head.status == DeliveryStatus::Uncertain;
    let acknowledged = RwSignal::new(!uncertain);
    let reason = RwSignal::new(String::new());
    let waiting = match lane.waiting {
        0 => "nothing waits behind it yet".to_string(),
        1 => "1 delivery waits behind it".to_string(),
        n => format!("{n} deliveries wait behind it"),
    };
    let (what, consequence, risk) = if skip {
        (
            "Skip this head?",
            format!("Skipping gives this delivery up for good and lets the lane go on: {waiting}, and will be delivered next. It is audited with your reason."),
            "I understand the receiver may never have had it, and I want to skip it.",
        )
    } else {
        (
            "Retry this head?",
            format!("Retrying starts a new cycle of attempts; the lane ({waiting}) waits until it completes."),
            "I understand the receiver may already have it and may get it twice, and I want to retry.",
        )
    };
    let ready = move || acknowledged.get() && (!skip || !reason.get().trim().is_empty());
    let send = move |_| {
        if !ready() {
            return;
        }
        let action = if skip {
            HeadAction::Skip(
                head.event_id.clone(),
                SkipCommand {
                    kind: head.kind.clone(),
                    expected_status: head.status,
                    expected_cycle: Some(head.cycle),
                    allow_uncertain: uncertain,
                    reason: reason.get_untracked(),
                },
            )
        } else {
            HeadAction::Retry(RetryCommand {
                event_id: head.event_id.clone(),
                kind: head.kind.clone(),
                expected_status: head.status,
                expected_cycle: head.cycle,
                allow_uncertain: uncertain,
            })
        };
        act.dispatch(action);
        confirming.set(None);
    };
    let title_id = format!("lane-confirm-{}", lane.head.event_id);
    let labelled_by = title_id.clone();
    view! {
        <div class="lane-confirm-box" role="group" aria-labelledby=labelled_by data-testid="lane-confirm">
            <h3 id=title_id>{what}</h3>
            <p>{consequence}</p>
            {skip.then(|| view! {
                <label class="field">
                    <span>"Reason (kept in the audit trail)"</span>
                    <textarea data-testid="lane-skip-reason" rows="2" maxlength=MAX_SKIP_REASON.to_string() required=true
                        prop:value=move || reason.get()
                        on:input=move |ev| reason.set(event_target_value(&ev))></textarea>
                </label>
            })}
            {uncertain.then(|| view! {
                <label class="ack">
                    <input type="checkbox" data-testid="lane-acknowledge"
                        prop:checked=move || acknowledged.get()
                        on:change=move |ev| acknowledged.set(event_target_checked(&ev)) />
                    " " {risk}
                </label>
            })}
            <p class="modal-actions">
                <button type="button" class="button" data-testid="lane-cancel" on:click=move |_| confirming.set(None)>"Cancel"</button>
                <button type="button" class="button danger" data-testid="lane-confirm-send"
                    disabled=move || !ready() || act.pending().get() on:click=send>
                    {if skip { "Skip head" } else { "Retry head" }}
                </button>
            </p>
        </div>
    }
}
