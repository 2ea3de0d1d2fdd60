//! Users and tokens (issue 23, item 6): who can sign in to the console and which
//! scripts can call the API. Admins (`users:manage`) add users, change roles,
//! disable, reset passwords, create and revoke tokens; a secret Herald makes is
//! shown once. The server refuses everyone else (a designed 403 here) and audits
//! every change in the transaction that makes it.

use leptos::prelude::*;
use leptos_meta::Title;

use crate::api::accounts::{add_user, change_user, create_token, list_accounts, revoke_token};
use crate::api::Failure;
use crate::components::{page_viewer, ErrorPanel, ScrollingTable, TopBar, ViewerResource};
use crate::dto::{AccountOutcome, AccountsView, Permission, Role, TokenRow, UserAction, UserRow};
use crate::format::display_time;

/// One change the page asks of the server.
#[derive(Clone, Debug)]
enum Command {
    AddUser {
        username: String,
        role: String,
        password: String,
    },
    ChangeUser {
        user_id: String,
        action: UserAction,
        role: Option<String>,
    },
    CreateToken {
        name: String,
        role: String,
    },
    RevokeToken {
        token_id: String,
    },
}

async fn send(command: Command) -> Result<AccountOutcome, Failure> {
    match command {
        Command::AddUser {
            username,
            role,
            password,
        } => add_user(username, role, Some(password)).await,
        Command::ChangeUser {
            user_id,
            action,
            role,
        } => change_user(user_id, action.as_str().to_string(), role, None).await,
        Command::CreateToken { name, role } => create_token(name, role).await,
        Command::RevokeToken { token_id } => revoke_token(token_id).await,
    }
}

/// A change that ends sessions or access waits for a second click.
#[derive(Clone, Debug)]
struct Pending {
    question: String,
    confirm: &'static str,
    command: Command,
}

#[component]
pub fn UsersPage() -> impl IntoView {
    // Read once for the page: the top bar and the forms share it.
    let viewer = page_viewer();
    let accounts = Resource::new(|| (), |_| list_accounts());
    let act = Action::new(|command: &Command| send(command.clone()));
    let pending = RwSignal::new(None::<Pending>);
    // A change made is shown anew; a refusal changed nothing.
    Effect::new(move |_| {
        if act.value().with(|v| matches!(v, Some(Ok(_)))) {
            accounts.refetch();
        }
    });
    view! {
        <Title text="Users and tokens · Herald" />
        <TopBar />
        <main id="main" tabindex="-1" class="page">
            <div class="page-head">
                <div>
                    <h1>"Users and tokens"</h1>
                    <p class="muted">"Who can sign in to the console, and which scripts can call the API. Every change here is audited."</p>
                </div>
            </div>
            <Outcome act />
            <Confirm pending act />
            <Lists accounts act pending viewer />
        </main>
    }
}

/// The users and tokens, each list followed by its form. The forms sit outside
/// the lists, which reload after every change: what is typed in one stays until
/// its own form is sent.
#[component]
fn Lists(
    accounts: Resource<Result<AccountsView, Failure>>,
    act: Action<Command, Result<AccountOutcome, Failure>>,
    pending: RwSignal<Option<Pending>>,
    viewer: ViewerResource,
) -> impl IntoView {
    // The forms are for whoever may manage users, read once: never rebuilt by a
    // reload of the lists.
    let manages = move || async move {
        viewer
            .await
            .ok()
            .flatten()
            .is_some_and(|v| v.can(Permission::UsersManage))
    };
    view! {
        <Transition fallback=|| view! { <div class="panel state">"Loading users…"</div> }>
            {move || Suspend::new(async move {
                match accounts.await {
                    Ok(AccountsView { users, .. }) => view! { <UsersPanel users act pending /> }.into_any(),
                    Err(failure) => view! {
                        <ErrorPanel failure what="Users could not be loaded" retry="/users".to_string() />
                    }
                    .into_any(),
                }
            })}
        </Transition>
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move { manages().await.then(|| view! { <AddUserForm act /> }) })}
        </Suspense>
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                accounts.await.ok().map(|AccountsView { tokens, .. }| view! { <TokensPanel tokens act pending /> })
            })}
        </Transition>
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move { manages().await.then(|| view! { <CreateTokenForm act /> }) })}
        </Suspense>
    }
    .into_any()
}

/// What the last change did: its words, a secret to copy now (shown once), or
/// why it was refused.
#[component]
fn Outcome(act: Action<Command, Result<AccountOutcome, Failure>>) -> impl IntoView {
    let copied = RwSignal::new(false);
    view! {
        <div class="notice-slot" aria-live="polite">
            {move || act.value().get().map(|result| match result {
                Ok(AccountOutcome { message, secret }) => {
                    copied.set(false);
                    view! {
                        <div class="panel account-outcome" role="status" data-testid="account-outcome">
                            <p data-testid="account-message">{message}</p>
                            {secret.map(|secret| {
                                let whole = secret.clone();
                                view! {
                                    <p class="secret-label"><strong>"Shown once: copy it now. Herald keeps only its hash."</strong></p>
                                    <p class="secret-value">
                                        <code data-testid="account-secret">{secret}</code>
                                        <button type="button" class="button" data-testid="copy-secret"
                                            on:click=move |_| {
                                                let _ = window().navigator().clipboard().write_text(&whole);
                                                copied.set(true);
                                            }>
                                            {move || if copied.get() { "Copied" } else { "Copy" }}
                                        </button>
                                    </p>
                                }
                            })}
                        </div>
                    }
                    .into_any()
                }
                Err(Failure { message, .. }) => view! {
                    <p class="alert error" role="alert" data-testid="account-error">{message}</p>
                }
                .into_any(),
            })}
        </div>
    }
}

/// The second click of a disable, a password reset or a revoke.
#[component]
fn Confirm(
    pending: RwSignal<Option<Pending>>,
    act: Action<Command, Result<AccountOutcome, Failure>>,
) -> impl IntoView {
    // The second click is the keyboard's next stop too.
    let yes = NodeRef::<leptos::html::Button>::new();
    Effect::new(move |_| {
        if pending.with(|p| p.is_some()) {
            if let Some(button) = yes.get() {
                let _ = button.focus();
            }
        }
    });
    move || {
        pending.get().map(|Pending { question, confirm, command }| {
            view! {
                <section class="panel confirm" role="alertdialog" aria-labelledby="confirm-question" data-testid="confirm">
                    <p id="confirm-question">{question}</p>
                    <p class="modal-actions">
                        <button type="button" class="button" data-testid="confirm-cancel"
                            on:click=move |_| pending.set(None)>"Cancel"</button>
                        <button type="button" class="button danger" data-testid="confirm-yes" node_ref=yes
                            disabled=move || act.pending().get()
                            on:click=move |_| { act.dispatch(command.clone()); pending.set(None); }>
                            {confirm}
                        </button>
                    </p>
                </section>
            }
        })
    }
}

fn role_options(selected: Role) -> impl IntoView {
    Role::ALL
        .into_iter()
        .map(|role| view! { <option value=role.as_str() selected=role == selected>{role.as_str()}</option> })
        .collect_view()
}

#[component]
fn UsersPanel(
    users: Vec<UserRow>,
    act: Action<Command, Result<AccountOutcome, Failure>>,
    pending: RwSignal<Option<Pending>>,
) -> impl IntoView {
    let body = if users.is_empty() {
        view! { <p class="muted" data-testid="users-empty">"No users yet."</p> }.into_any()
    } else {
        view! {
            <ScrollingTable label="User list">
                <table class="runs" data-testid="users-table">
                    <thead>
                        <tr>
                            <th>"User"</th>
                            <th>"Role"</th>
                            <th>"Status"</th>
                            <th>"Added"</th>
                            <th>"Actions"</th>
                        </tr>
                    </thead>
                    <tbody>
                        {users.into_iter().map(|user| view! { <UserLine user act pending /> }).collect_view()}
                    </tbody>
                </table>
            </ScrollingTable>
        }
        .into_any()
    };
    view! {
        <section class="panel accounts" aria-labelledby="users-title" data-testid="users">
            <h2 id="users-title">"Users"</h2>
            <p class="muted">"A disabled user cannot sign in, and is signed out everywhere. A password reset ends the user's sessions too."</p>
            {body}
        </section>
    }
}

#[component]
fn UserLine(
    user: UserRow,
    act: Action<Command, Result<AccountOutcome, Failure>>,
    pending: RwSignal<Option<Pending>>,
) -> impl IntoView {
    let role_ref = NodeRef::<leptos::html::Select>::new();
    let UserRow {
        id,
        username,
        role,
        created_at,
        disabled,
        is_you,
    } = user;
    let (role_id, disable_id, reset_id) = (id.clone(), id.clone(), id);
    let (name_for_disable, name_for_reset) = (username.clone(), username.clone());
    let change_role = move |_| {
        let Some(select) = role_ref.get() else { return };
        act.dispatch(Command::ChangeUser {
            user_id: role_id.clone(),
            action: UserAction::Role,
            role: Some(select.value()),
        });
    };
    let toggle = move |_| {
        let command = Command::ChangeUser {
            user_id: disable_id.clone(),
            action: if disabled {
                UserAction::Enable
            } else {
                UserAction::Disable
            },
            role: None,
        };
        if disabled {
            act.dispatch(command);
        } else {
            pending.set(Some(Pending {
                question: format!("Disable {name_for_disable}? They are signed out everywhere and cannot sign in until enabled again."),
                confirm: "Disable",
                command,
            }));
        }
    };
    let reset = move |_| {
        pending.set(Some(Pending {
            question: format!("Reset {name_for_reset}'s password? Herald makes a new one, shown once; their sessions end."),
            confirm: "Reset password",
            command: Command::ChangeUser {
                user_id: reset_id.clone(),
                action: UserAction::ResetPassword,
                role: None,
            },
        }));
    };
    let label = format!("New role for {username}");
    view! {
        <tr data-testid="user-row" data-username=username.clone()>
            <td>
                <strong>{username.clone()}</strong>
                {is_you.then(|| view! { " " <span class="muted">"(you)"</span> })}
            </td>
            <td><span class=format!("role role-{}", role.as_str()) data-testid="user-role">{role.as_str()}</span></td>
            <td>
                {if disabled {
                    view! { <span class="badge delivery-failed" data-testid="user-status">"disabled"</span> }
                } else {
                    view! { <span class="badge delivery-completed" data-testid="user-status">"active"</span> }
                }}
            </td>
            <td class="time" title=created_at.clone()>{display_time(&created_at)}</td>
            <td><div class="row-actions">
                // Your own role, access and password are another admin's to change.
                {(!is_you).then(|| view! {
                    <select node_ref=role_ref aria-label=label data-testid="user-role-select">{role_options(role)}</select>
                    <button type="button" class="button" data-testid="user-role-apply"
                        disabled=move || act.pending().get() on:click=change_role>"Change role"</button>
                    <button type="button" class="button" data-testid=if disabled { "user-enable" } else { "user-disable" }
                        disabled=move || act.pending().get() on:click=toggle>
                        {if disabled { "Enable" } else { "Disable" }}
                    </button>
                    <button type="button" class="button" data-testid="user-reset"
                        disabled=move || act.pending().get() on:click=reset>"Reset password"</button>
                })}
            </div></td>
        </tr>
    }
}

#[component]
fn AddUserForm(act: Action<Command, Result<AccountOutcome, Failure>>) -> impl IntoView {
    let username = NodeRef::<leptos::html::Input>::new();
    let role = NodeRef::<leptos::html::Select>::new();
    let password = NodeRef::<leptos::html::Input>::new();
    // The form empties once the user it sent is added; a refusal leaves it as
    // it was, to be corrected.
    let sent = RwSignal::new(false);
    Effect::new(move |_| {
        // Each answer moves the version on (its value is set by then).
        act.version().track();
        let added = act.value().with_untracked(|v| matches!(v, Some(Ok(_))));
        if sent.get_untracked() {
            sent.set(false);
            if let (true, Some(username), Some(password)) =
                (added, username.get_untracked(), password.get_untracked())
            {
                username.set_value("");
                password.set_value("");
            }
        }
    });
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let (Some(username), Some(role), Some(password)) =
            (username.get(), role.get(), password.get())
        else {
            return;
        };
        sent.set(true);
        act.dispatch(Command::AddUser {
            username: username.value(),
            role: role.value(),
            password: password.value(),
        });
    };
    view! {
        <section class="panel accounts" aria-labelledby="add-user-title">
            <h2 id="add-user-title">"Add a user"</h2>
            <form class="account-form" data-testid="add-user-form" on:submit=submit>
                <label>"Username" <input node_ref=username name="username" required maxlength="64" autocomplete="off" data-testid="add-username" /></label>
                <label>"Role" <select node_ref=role name="role" data-testid="add-role">{role_options(Role::Reader)}</select></label>
                <label>"Password "<span class="muted small">"(empty: Herald makes one, shown once)"</span>
                    <input node_ref=password name="password" type="password" autocomplete="new-password" data-testid="add-password" />
                </label>
                <button type="submit" class="button" data-testid="add-user" disabled=move || act.pending().get()>"Add user"</button>
            </form>
        </section>
    }
}

#[component]
fn TokensPanel(
    tokens: Vec<TokenRow>,
    act: Action<Command, Result<AccountOutcome, Failure>>,
    pending: RwSignal<Option<Pending>>,
) -> impl IntoView {
    let body = if tokens.is_empty() {
        view! {
            <div class="state" data-testid="tokens-empty">
                <h3>"No API tokens yet"</h3>
                <p class="muted">"Scripts and CI jobs send one as Authorization: Bearer <token>. Create one below; its secret is shown once."</p>
            </div>
        }
        .into_any()
    } else {
        view! {
            <ScrollingTable label="Token list">
                <table class="runs" data-testid="tokens-table">
                    <thead>
                        <tr>
                            <th>"Token"</th>
                            <th>"Role"</th>
                            <th>"Created"</th>
                            <th>"By"</th>
                            <th>"Status"</th>
                            <th>"Actions"</th>
                        </tr>
                    </thead>
                    <tbody>
                        {tokens.into_iter().map(|token| {
                            let TokenRow { id, name, role, created_at, created_by, revoked_at } = token;
                            let active = revoked_at.is_none();
                            let row_name = name.clone();
                            let question = format!("Revoke the token {name}? Scripts using it are refused from their next request.");
                            let revoke = move |_| pending.set(Some(Pending {
                                question: question.clone(),
                                confirm: "Revoke",
                                command: Command::RevokeToken { token_id: id.clone() },
                            }));
                            view! {
                                <tr data-testid="token-row" data-name=row_name>
                                    <td><strong>{name}</strong></td>
                                    <td><span class=format!("role role-{}", role.as_str())>{role.as_str()}</span></td>
                                    <td class="time" title=created_at.clone()>{display_time(&created_at)}</td>
                                    <td data-testid="token-by">{created_by.unwrap_or_else(|| "—".into())}</td>
                                    <td>
                                        {match revoked_at {
                                            Some(at) => view! { <span class="badge delivery-failed" data-testid="token-status" title=at.clone()>{format!("revoked {}", display_time(&at))}</span> }.into_any(),
                                            None => view! { <span class="badge delivery-completed" data-testid="token-status">"active"</span> }.into_any(),
                                        }}
                                    </td>
                                    <td><div class="row-actions">
                                        {active.then(|| view! {
                                            <button type="button" class="button" data-testid="token-revoke"
                                                disabled=move || act.pending().get() on:click=revoke>"Revoke"</button>
                                        })}
                                    </div></td>
                                </tr>
                            }
                        }).collect_view()}
                    </tbody>
                </table>
            </ScrollingTable>
        }
        .into_any()
    };
    view! {
        <section class="panel accounts" aria-labelledby="tokens-title" data-testid="tokens">
            <h2 id="tokens-title">"API tokens"</h2>
            <p class="muted">"A token is not tied to the user who made it: disabling that user leaves the token working until it is revoked here."</p>
            {body}
        </section>
    }
}

#[component]
fn CreateTokenForm(act: Action<Command, Result<AccountOutcome, Failure>>) -> impl IntoView {
    let name = NodeRef::<leptos::html::Input>::new();
    let role = NodeRef::<leptos::html::Select>::new();
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let (Some(name), Some(role)) = (name.get(), role.get()) else {
            return;
        };
        act.dispatch(Command::CreateToken {
            name: name.value(),
            role: role.value(),
        });
    };
    view! {
        <section class="panel accounts" aria-labelledby="create-token-title">
            <h2 id="create-token-title">"Create a token"</h2>
            <form class="account-form" data-testid="create-token-form" on:submit=submit>
                <label>"Name" <input node_ref=name name="name" required maxlength="128" autocomplete="off" data-testid="token-name" /></label>
                <label>"Role" <select node_ref=role name="role" data-testid="token-role">{role_options(Role::Reader)}</select></label>
                <button type="submit" class="button" data-testid="create-token" disabled=move || act.pending().get()>"Create token"</button>
            </form>
        </section>
    }
}
