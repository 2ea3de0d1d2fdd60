//! The run detail page: the run's facts (redacted by the server for the viewer), its
//! deliveries with their attempt timelines, and retry for operators. A retry sends
//! the state the operator saw; a delivery that changed meanwhile is reported, never
//! retried blindly. An `uncertain` delivery is retried only through the
//! acknowledgement dialog. While a delivery is in flight the page refreshes itself.
//! A run paused for approval shows its approval (state, step, approver, prompt
//! delivery) with the buttons its viewer may use; loaded on its own, so an
//! approvals store that is down leaves the rest of the page working.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;

use crate::api::approvals::{run_approvals, ActOnApproval};
use crate::api::{load_run, retry_delivery, Failure};
use crate::components::{poll_while_visible, set_status, CapabilityNotice, ErrorPanel, TopBar};
use crate::dto::{
    AttemptView, DeliveryDetail, DeliveryStatus, DeliveryView, RetryCommand, RunFacts, RunStatus,
    RunView,
};
use crate::format::{display_time, short_id};
use crate::pages::approvals::ApprovalCard;

/// What the page says after a retry.
#[derive(Clone, Debug, PartialEq)]
enum Notice {
    Retried { event_id: String },
    Changed { event_id: String, message: String },
    Refused { event_id: String, message: String },
}

#[component]
pub fn RunPage() -> impl IntoView {
    let params = use_params_map();
    let id = Memo::new(move |_| params.with(|p| p.get("id").unwrap_or_default()));
    let page = Resource::new(move || id.get(), load_run);
    let notice = RwSignal::new(None::<Notice>);
    let dialog = RwSignal::new(None::<DeliveryView>);
    let retry = Action::new(|command: &RetryCommand| retry_delivery(command.clone()));
    Effect::new(move |_| {
        let Some(result) = retry.value().get() else {
            return;
        };
        let event_id = retry
            .input()
            .get_untracked()
            .map(|c| c.event_id)
            .unwrap_or_default();
        notice.set(Some(match result {
            Ok(delivery) => Notice::Retried {
                event_id: delivery.event_id,
            },
            Err(Failure {
                status: 409,
                message,
            }) => Notice::Changed { event_id, message },
            Err(Failure { message, .. }) => Notice::Refused { event_id, message },
        }));
        page.refetch();
    });
    // Live updates: while a delivery is pending or in flight (and no dialog is
    // open), reload the run every two seconds.
    poll_while_visible(
        move || {
            dialog.with_untracked(Option::is_none)
                && page.get_untracked().is_some_and(|r| {
                    r.is_ok_and(|v| {
                        v.deliveries.iter().any(|d| {
                            matches!(
                                d.delivery.status,
                                DeliveryStatus::Pending | DeliveryStatus::Processing
                            )
                        })
                    })
                })
        },
        move || page.refetch(),
    );
    let send = Callback::new(move |command: RetryCommand| {
        notice.set(None);
        retry.dispatch(command);
    });

    view! {
        <Title text="Run · Herald" />
        <TopBar />
        <main id="main" tabindex="-1" class="page">
            <p class="crumbs"><a href="/runs">"← Runs"</a></p>
            <Transition fallback=|| view! { <div class="panel state">"Loading the run…"</div> }>
                {move || Suspend::new(async move {
                    match page.await {
                        Ok(view) => view! { <RunDetailView view notice dialog send pending=retry.pending() /> }.into_any(),
                        Err(failure) if failure.status == 404 => view! { <RunNotFound id=id.get_untracked() /> }.into_any(),
                        Err(failure) => {
                            let retry = format!("/runs/{}", id.get_untracked());
                            view! { <ErrorPanel failure what="The run could not be loaded" retry /> }.into_any()
                        }
                    }
                })}
            </Transition>
            <RunApprovals id page />
            {move || dialog.get().map(|delivery| view! {
                <UncertainDialog
                    delivery
                    on_close=Callback::new(move |event_id: String| {
                        dialog.set(None);
                        focus_retry_button(&event_id);
                    })
                    on_confirm=Callback::new(move |command: RetryCommand| {
                        dialog.set(None);
                        send.run(command);
                    })
                />
            })}
        </main>
    }
}

/// The run's approvals (DESIGN §9), refreshed while one is pending or the run
/// waits on one; after a decision the run itself is reloaded, since its
/// continuation moves it.
#[component]
fn RunApprovals(id: Memo<String>, page: Resource<Result<RunView, Failure>>) -> impl IntoView {
    let act = ServerAction::<ActOnApproval>::new();
    let approvals = Resource::new(
        move || (id.get(), act.version().get()),
        |(id, _)| run_approvals(id),
    );
    Effect::new(move |_| {
        if act.version().get() > 0 {
            page.refetch();
        }
    });
    poll_while_visible(
        move || {
            let waiting = page
                .get_untracked()
                .is_some_and(|r| r.is_ok_and(|v| v.run.status == RunStatus::AwaitingApproval));
            let pending = approvals.get_untracked().is_some_and(|r| {
                r.is_ok_and(|list| list.iter().any(|a| a.approval.status == "pending"))
            });
            waiting || pending
        },
        move || {
            approvals.refetch();
            page.refetch();
        },
    );
    let act_error = move || {
        act.value().get().and_then(|r| r.err()).map(|failure| {
            view! {
                <p class="alert error" role="alert" data-testid="approval-action-error">
                    "Not done: " {failure.message}
                </p>
            }
        })
    };
    view! {
        <section class="run-approvals" aria-labelledby="run-approvals-title">
            <h2 id="run-approvals-title">"Approval"</h2>
            {act_error}
            <Transition fallback=|| view! { <div class="panel state">"Loading the run's approval…"</div> }>
                {move || Suspend::new(async move {
                    match approvals.await {
                        Ok(list) if list.is_empty() => view! {
                            <p class="muted" data-testid="no-approvals">
                                "This run has not asked for approval. A run pauses for one by moving to "
                                <code>"awaiting_approval"</code> " with an approval definition."
                            </p>
                        }.into_any(),
                        Ok(list) => list
                            .into_iter()
                            .map(|detail| view! { <ApprovalCard detail act /> })
                            .collect_view()
                            .into_any(),
                        Err(failure) => view! {
                            <div class="panel state error" role="alert" data-testid="run-approvals-error">
                                <p>"The run's approvals could not be loaded: " {failure.message}</p>
                                <p class="muted">"The rest of this page comes from the jobs store and keeps working."</p>
                            </div>
                        }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}

#[component]
fn RunNotFound(id: String) -> impl IntoView {
    set_status(404);
    view! {
        <Title text="Run not found · Herald" />
        <div class="panel state" data-testid="run-not-found">
            <p class="state-code">"404"</p>
            <h1>"Run not found"</h1>
            <p class="muted">"No run has the id " <code>{id}</code> ". It may never have been recorded here, or the link may be mistyped."</p>
            <a href="/runs" class="button">"Back to Runs"</a>
        </div>
    }
}

#[component]
fn RunDetailView(
    view: RunView,
    notice: RwSignal<Option<Notice>>,
    dialog: RwSignal<Option<DeliveryView>>,
    send: Callback<RetryCommand>,
    pending: Memo<bool>,
) -> impl IntoView {
    let RunView {
        run,
        deliveries,
        deliveries_unavailable,
    } = view;
    let count = deliveries.len();
    view! {
        <Title text=format!("Run {} · Herald", short_id(&run.id)) />
        <RunFactsView run />
        <section class="deliveries" aria-labelledby="deliveries-title">
            <h2 id="deliveries-title">"Deliveries " <span class="muted">"(" {count} ")"</span></h2>
            <div role="status" aria-live="polite" class="notice-slot">
                {move || notice.get().map(|n| view! { <NoticeView notice=n /> })}
            </div>
            {if let Some(reason) = deliveries_unavailable {
                view! { <CapabilityNotice reason /> }.into_any()
            } else if deliveries.is_empty() {
                view! {
                    <div class="panel state" data-testid="no-deliveries">
                        <p class="muted">"This run owes no notifications yet: they are created when it reaches a terminal state."</p>
                    </div>
                }.into_any()
            } else {
                deliveries
                    .into_iter()
                    .map(|detail| view! { <DeliveryCard detail dialog send pending /> })
                    .collect_view()
                    .into_any()
            }}
        </section>
    }
}

#[component]
fn NoticeView(notice: Notice) -> impl IntoView {
    match notice {
        Notice::Retried { event_id } => view! {
            <p class="alert ok" data-testid="retry-notice">
                "Retry scheduled for " <code>{event_id}</code> ": it is pending again and keeps its id and attempt count."
            </p>
        }
        .into_any(),
        Notice::Changed { event_id, message } => view! {
            <p class="alert warn" data-testid="retry-conflict">
                <strong>"Not retried: this delivery changed meanwhile. "</strong>
                "Someone or something acted on " <code>{event_id}</code>
                " after this page loaded (" {message} "). Its current state is shown below; check it before retrying."
            </p>
        }
        .into_any(),
        Notice::Refused { event_id, message } => view! {
            <p class="alert error" data-testid="retry-refused">
                "Retry of " <code>{event_id}</code> " refused: " {message}
            </p>
        }
        .into_any(),
    }
}

#[component]
fn RunFactsView(run: RunFacts) -> impl IntoView {
    let status = run.status.as_str();
    let routes = if run.routes.is_empty() {
        "—".to_string()
    } else {
        run.routes.join(", ")
    };
    view! {
        <div class="page-head">
            <div>
                <h1>"Run " <span class="mono">{short_id(&run.id)}</span></h1>
                <p class="muted mono" data-testid="run-id">{run.id.clone()}</p>
            </div>
            <span class=format!("badge big status-{status}") data-testid="run-status">{run.status.label()}</span>
        </div>
        <section class="panel facts" aria-label="Run facts">
            <dl>
                <dt>"Type"</dt><dd>{run.run_type}</dd>
                <dt>"Tenant"</dt><dd data-testid="run-tenant">{run.tenant}</dd>
                <dt>"Callback"</dt>
                <dd data-testid="run-callback">
                    {run.callback_url.or(run.callback_origin).unwrap_or_else(|| "—".into())}
                </dd>
                <dt>"Routes"</dt><dd>{routes}</dd>
                <dt>"Transitions"</dt><dd>{run.transition_seq}</dd>
                <dt>"Created"</dt><dd title=run.created_at.clone()>{display_time(&run.created_at)}</dd>
                <dt>"Updated"</dt><dd title=run.updated_at.clone()>{display_time(&run.updated_at)}</dd>
            </dl>
            {match run.result {
                Some(result) => view! {
                    <div class="result">
                        <h2>"Result"</h2>
                        <pre data-testid="run-result">{result}</pre>
                    </div>
                }.into_any(),
                None => view! {
                    <p class="muted small" data-testid="result-hidden">
                        "The result snapshot is payload data: it is shown only to viewers with the data:read permission."
                    </p>
                }.into_any(),
            }}
        </section>
    }
}

#[component]
fn DeliveryCard(
    detail: DeliveryDetail,
    dialog: RwSignal<Option<DeliveryView>>,
    send: Callback<RetryCommand>,
    pending: Memo<bool>,
) -> impl IntoView {
    let DeliveryDetail {
        delivery,
        timeline,
        can_retry,
    } = detail;
    let d = delivery.clone();
    let status = d.status.as_str();
    let opt = |value: Option<String>| value.unwrap_or_else(|| "—".into());
    let time = |value: Option<String>| {
        value
            .map(|t| display_time(&t))
            .unwrap_or_else(|| "—".into())
    };
    let retry_button = can_retry.then(|| {
        let delivery = delivery.clone();
        let on_click = move |_| {
            if delivery.status == DeliveryStatus::Uncertain {
                dialog.set(Some(delivery.clone()));
            } else {
                send.run(RetryCommand {
                    event_id: delivery.event_id.clone(),
                    kind: delivery.kind.clone(),
                    expected_status: delivery.status,
                    expected_cycle: delivery.cycle,
                    allow_uncertain: false,
                });
            }
        };
        view! {
            <button type="button" class="button retry" data-testid="retry" data-retry=d.event_id.clone()
                disabled=move || pending.get() on:click=on_click>
                {if d.status == DeliveryStatus::Uncertain { "Retry…" } else { "Retry" }}
            </button>
        }
    });
    let attempts = timeline.len();
    view! {
        <article class="panel delivery" data-testid="delivery" data-event-id=d.event_id.clone() data-status=status>
            <header class="delivery-head">
                <div>
                    <span class="kind">{d.kind.clone()}</span>
                    <span class="muted">" via " {opt(d.channel.clone())}</span>
                    <div class="mono muted small">{d.event_id.clone()}</div>
                </div>
                <div class="delivery-actions">
                    <span class=format!("badge delivery-{status}") data-testid="delivery-status">{d.status.label()}</span>
                    {retry_button}
                </div>
            </header>
            <dl class="delivery-facts">
                <dt>"Destination"</dt><dd data-testid="delivery-destination">{opt(d.destination.clone())}</dd>
                <dt>"Attempts"</dt>
                <dd data-testid="delivery-attempts">
                    {d.attempts} " in all · " {d.cycle_attempts} " of " {d.max_attempts} " in cycle " {d.cycle}
                </dd>
                <dt>"Last status code"</dt><dd>{d.last_status_code.map(|c| c.to_string()).unwrap_or_else(|| "—".into())}</dd>
                <dt>"Last error"</dt><dd class="error-text" data-testid="delivery-error">{opt(d.last_error.clone())}</dd>
                <dt>"Next attempt"</dt><dd>{time(d.next_attempt_at.clone())}</dd>
                <dt>"Created"</dt><dd>{display_time(&d.created_at)}</dd>
                <dt>"Updated"</dt><dd>{display_time(&d.updated_at)}</dd>
                {d.completed_at.clone().map(|t| view! { <dt>"Completed"</dt><dd>{display_time(&t)}</dd> })}
                {d.failed_at.clone().map(|t| view! { <dt>"Failed"</dt><dd>{display_time(&t)}</dd> })}
                {d.uncertain_at.clone().map(|t| view! { <dt>"Uncertain since"</dt><dd>{display_time(&t)}</dd> })}
            </dl>
            <details class="timeline" data-testid="timeline">
                <summary>"Attempt timeline (" {attempts} ")"</summary>
                <Timeline attempts=timeline />
            </details>
        </article>
    }
}

#[component]
fn Timeline(attempts: Vec<AttemptView>) -> impl IntoView {
    if attempts.is_empty() {
        return view! { <p class="muted small">"No attempt has finished yet."</p> }.into_any();
    }
    view! {
        <table class="runs timeline-table">
            <thead>
                <tr>
                    <th>"#"</th>
                    <th>"Cycle"</th>
                    <th>"Started"</th>
                    <th>"Outcome"</th>
                    <th>"Status code"</th>
                    <th>"Duration"</th>
                    <th>"Error"</th>
                </tr>
            </thead>
            <tbody>
                {attempts
                    .into_iter()
                    .map(|a| {
                        let outcome = a.outcome.clone();
                        view! {
                            <tr data-testid="attempt">
                                <td>{a.attempt}</td>
                                <td>{a.cycle}</td>
                                <td class="time" title=a.started_at.clone()>{display_time(&a.started_at)}</td>
                                <td><span class=format!("outcome outcome-{outcome}") data-testid="attempt-outcome">{a.outcome}</span></td>
                                <td>{a.status_code.map(|c| c.to_string()).unwrap_or_else(|| "—".into())}</td>
                                <td>{a.duration_ms} " ms"</td>
                                <td class="error-text">{a.error.unwrap_or_else(|| "—".into())}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

/// The duplicate-risk acknowledgement for retrying an `uncertain` delivery: a modal
/// dialog that holds the keyboard focus (Tab and Shift+Tab cycle inside it), closes
/// on Escape, and sends `allow_uncertain: true` only once the box is ticked.
#[component]
fn UncertainDialog(
    delivery: DeliveryView,
    on_close: Callback<String>,
    on_confirm: Callback<RetryCommand>,
) -> impl IntoView {
    let acknowledged = RwSignal::new(false);
    let dialog_ref = NodeRef::<leptos::html::Div>::new();
    let checkbox_ref = NodeRef::<leptos::html::Input>::new();
    Effect::new(move |_| {
        if let Some(checkbox) = checkbox_ref.get() {
            let _ = checkbox.focus();
        }
    });
    let event_id = delivery.event_id.clone();
    let close_id = event_id.clone();
    let on_keydown = move |ev: leptos::ev::KeyboardEvent| match ev.key().as_str() {
        "Escape" => {
            ev.prevent_default();
            on_close.run(close_id.clone());
        }
        "Tab" => {
            if let Some(dialog) = dialog_ref.get() {
                trap_focus(&dialog, &ev);
            }
        }
        _ => {}
    };
    let cancel_id = event_id.clone();
    let confirm = {
        let delivery = delivery.clone();
        move |_| {
            if acknowledged.get_untracked() {
                on_confirm.run(RetryCommand {
                    event_id: delivery.event_id.clone(),
                    kind: delivery.kind.clone(),
                    expected_status: DeliveryStatus::Uncertain,
                    expected_cycle: delivery.cycle,
                    allow_uncertain: true,
                });
            }
        }
    };
    let destination = delivery
        .destination
        .clone()
        .unwrap_or_else(|| "the receiver".into());
    view! {
        <div class="modal-backdrop">
            <div class="panel modal" role="dialog" aria-modal="true" aria-labelledby="uncertain-title"
                aria-describedby="uncertain-risk" node_ref=dialog_ref on:keydown=on_keydown data-testid="uncertain-dialog">
                <h2 id="uncertain-title">"Retry an uncertain delivery?"</h2>
                <div id="uncertain-risk">
                    <p>
                        "Herald does not know whether " <code>{event_id.clone()}</code> " reached "
                        <strong>{destination}</strong> ": the send started but its outcome was never confirmed."
                    </p>
                    <p>
                        <strong>"The receiver may already have it, and it cannot recognise a second copy. "</strong>
                        "Retrying can deliver this notification twice. Check with the receiver first."
                    </p>
                </div>
                <label class="ack">
                    <input type="checkbox" node_ref=checkbox_ref data-testid="acknowledge"
                        prop:checked=move || acknowledged.get()
                        on:change=move |ev| acknowledged.set(event_target_checked(&ev)) />
                    " I understand this may deliver a duplicate, and I want to retry."
                </label>
                <div class="modal-actions">
                    <button type="button" class="button" data-testid="dialog-cancel"
                        on:click=move |_| on_close.run(cancel_id.clone())>"Cancel"</button>
                    <button type="button" class="button danger" data-testid="dialog-confirm"
                        disabled=move || !acknowledged.get() on:click=confirm>"Retry anyway"</button>
                </div>
            </div>
        </div>
    }
}

/// Keeps Tab and Shift+Tab inside `dialog`: from its last focusable element back to
/// its first, and the other way round.
fn trap_focus(dialog: &web_sys::HtmlDivElement, ev: &leptos::ev::KeyboardEvent) {
    use wasm_bindgen::JsCast;
    let Ok(nodes) = dialog.query_selector_all("input, button:not([disabled]), a[href]") else {
        return;
    };
    let focusable: Vec<web_sys::HtmlElement> = (0..nodes.length())
        .filter_map(|i| nodes.item(i))
        .filter_map(|n| n.dyn_into::<web_sys::HtmlElement>().ok())
        .collect();
    let (Some(first), Some(last)) = (focusable.first(), focusable.last()) else {
        return;
    };
    let active = document().active_element();
    let is = |el: &web_sys::HtmlElement| {
        active
            .as_ref()
            .is_some_and(|a| a == el.unchecked_ref::<web_sys::Element>())
    };
    let inside = active
        .as_ref()
        .is_some_and(|a| dialog.contains(Some(a.unchecked_ref())));
    if ev.shift_key() && (is(first) || !inside) {
        ev.prevent_default();
        let _ = last.focus();
    } else if !ev.shift_key() && (is(last) || !inside) {
        ev.prevent_default();
        let _ = first.focus();
    }
}

/// Gives the focus back to a delivery's Retry button after the dialog closes.
fn focus_retry_button(event_id: &str) {
    use wasm_bindgen::JsCast;
    let selector = format!("[data-retry=\"{}\"]", event_id.replace('"', ""));
    if let Ok(Some(button)) = document().query_selector(&selector) {
        if let Ok(button) = button.dyn_into::<web_sys::HtmlElement>() {
            let _ = button.focus();
        }
    }
}
