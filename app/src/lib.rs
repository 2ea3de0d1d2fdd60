//! Herald's operator console: a Leptos app rendered on the server and hydrated in
//! the browser. The server implements [`port::ConsolePort`] and
//! [`port::ApprovalsPort`]; server functions in [`api`] (the Approvals page's in
//! [`api::approvals`]) reach them through context, so this crate never touches the
//! database.

#![recursion_limit = "256"]

pub mod api;
mod components;
pub mod dto;
mod format;
mod live;
mod pages;
#[cfg(feature = "ssr")]
pub mod port;

pub use pages::{shell, App};

/// The browser entry point: attaches the server-rendered HTML to the reactive app.
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(App);
}
