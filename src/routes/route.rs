//! A route: a named, configured destination (DESIGN §1 "delivery routes") and the
//! checks its settings must pass before Herald starts.

use serde::Deserialize;

use super::url::validate_url;
use crate::channels::email::{check_template, SmtpTarget};
use crate::channels::secrets::validate_reference;

/// Route names go into event ids (`dead_letter_deliver_<run>_<route>_<cycle>`),
/// which must fit a 191-character key on MySQL.
pub const MAX_ROUTE_NAME_LEN: usize = 64;

/// A named, configured destination for run results (DESIGN §1 "delivery routes").
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    pub name: String,
    pub channel: RouteChannel,
    pub url: String,
    /// Shown as the sender (chat) or in the body (webhook).
    #[serde(default)]
    pub brand: Option<String>,
    /// Webhook signing secret, or SMTP `user:password` (e-mail), by reference
    /// (env:NAME or file:/path).
    #[serde(default)]
    pub secret_ref: Option<String>,
    /// E-mail: the recipients (one address or a list).
    #[serde(default, deserialize_with = "one_or_many")]
    pub to: Vec<String>,
    /// E-mail: the sender's address (the brand is its display name).
    #[serde(default)]
    pub from: Option<String>,
    /// E-mail: the subject template (`{run_id}`, `{status}`, … from the snapshot).
    #[serde(default)]
    pub subject: Option<String>,
    /// E-mail: the text body template.
    #[serde(default)]
    pub body: Option<String>,
    /// Deliveries in flight at once to this route's destination origin
    /// (default: `destination_max_in_flight`).
    #[serde(default)]
    pub max_in_flight: Option<usize>,
    /// Deliver this route's events of one run (or one tenant) one at a time, in
    /// the order their transitions committed (docs/ORDERING.md). Unset: no order.
    #[serde(default)]
    pub ordered_by: Option<OrderedBy>,
}

/// What a route's ordered lanes are keyed by.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OrderedBy {
    Run,
    Tenant,
}

/// The longest lane key a store keeps (a 191-character key on MySQL).
pub const MAX_LANE_LEN: usize = 191;

impl RouteConfig {
    /// The lane a delivery of this route for `run_id` of `tenant` joins, if the
    /// route is ordered. A key too long to store is replaced by its SHA-256.
    pub fn lane(&self, run_id: &str, tenant: &str) -> Option<String> {
        let by = self.ordered_by?;
        Some(lane_key(
            &format!("route:{}", self.name),
            by,
            run_id,
            tenant,
        ))
    }
}

/// The lane of `scope`'s events (`route:<name>`, `callback`) for `run_id` of
/// `tenant`, ordered `by` run or tenant, bounded to what a store keeps.
pub fn lane_key(scope: &str, by: OrderedBy, run_id: &str, tenant: &str) -> String {
    bounded_lane(match by {
        OrderedBy::Run => format!("{scope}:run:{run_id}"),
        OrderedBy::Tenant => format!("{scope}:tenant:{tenant}"),
    })
}

/// `key`, or `sha256:<hex of key>` when it is longer than [`MAX_LANE_LEN`].
pub fn bounded_lane(key: String) -> String {
    use sha2::Digest;
    if key.len() <= MAX_LANE_LEN {
        key
    } else {
        format!(
            "sha256:{}",
            hex::encode(sha2::Sha256::digest(key.as_bytes()))
        )
    }
}

/// `to = "a@x"` or `to = ["a@x", "b@y"]`.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(one) => vec![one],
        OneOrMany::Many(many) => many,
    })
}

#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RouteChannel {
    Webhook,
    Chat,
    Email,
}

impl RouteConfig {
    /// Checks the route's name: it goes into event ids.
    pub fn check_name(&self) -> Result<(), String> {
        if self.name.len() > MAX_ROUTE_NAME_LEN {
            return Err(format!(
                "route name {:?} is longer than {MAX_ROUTE_NAME_LEN} characters",
                self.name
            ));
        }
        if self.name.is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(format!(
                "route name {:?} may hold only letters, digits, - and _",
                self.name
            ));
        }
        Ok(())
    }

    /// Checks the route's settings for its channel; the message names the route
    /// and the setting.
    pub fn check(&self) -> Result<(), String> {
        let in_route = |e: String| format!("route {:?}: {e}", self.name);
        if self.channel == RouteChannel::Email {
            self.check_email().map_err(in_route)?;
        } else {
            validate_url("url", &self.url).map_err(|e| in_route(e.to_string()))?;
            self.refuse_email_settings().map_err(in_route)?;
        }
        if self.max_in_flight == Some(0) {
            return Err(in_route(
                "max_in_flight must be greater than zero".to_string(),
            ));
        }
        if let Some(reference) = &self.secret_ref {
            validate_reference(reference).map_err(|e| in_route(e.to_string()))?;
        }
        Ok(())
    }

    /// Checks an email route's settings.
    fn check_email(&self) -> Result<(), String> {
        SmtpTarget::parse(&self.url)?;
        if self.to.is_empty() {
            return Err("`to` must name at least one recipient".into());
        }
        for to in &self.to {
            to.parse::<lettre::Address>()
                .map_err(|e| format!("`to` address {to:?} is not valid ({e})"))?;
        }
        if let Some(from) = &self.from {
            from.parse::<lettre::Address>()
                .map_err(|e| format!("`from` address {from:?} is not valid ({e})"))?;
        }
        for (setting, template) in [("subject", &self.subject), ("body", &self.body)] {
            if let Some(template) = template {
                check_template(template).map_err(|e| format!("`{setting}`: {e}"))?;
            }
        }
        Ok(())
    }

    /// Refuses e-mail settings on a route of another channel (a likely mistake).
    fn refuse_email_settings(&self) -> Result<(), String> {
        for (setting, set) in [
            ("to", !self.to.is_empty()),
            ("from", self.from.is_some()),
            ("subject", self.subject.is_some()),
            ("body", self.body.is_some()),
        ] {
            if set {
                return Err(format!("`{setting}` is only for email routes"));
            }
        }
        Ok(())
    }
}
