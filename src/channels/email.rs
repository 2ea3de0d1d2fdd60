//! E-mail over SMTP (`smtp://host:port` with STARTTLS when the server offers it,
//! `smtps://host:port` with implicit TLS). The message is rendered at send time
//! from the snapshot frozen at commit (subject and text body from the route's
//! templates, the brand as the sender's display name, the event id as its
//! Message-ID).
//!
//! The conversation is driven step by step (EHLO, MAIL, RCPT, DATA, then the
//! message) so a failure is classed by how far it got: a 4xx answer or a
//! connection failure before the message data left is retried, a 5xx answer
//! stops, and a connection lost (or a timeout) after the data began to leave and
//! before the server's final answer is `uncertain`: the server may have queued it,
//! and e-mail cannot be deduplicated by its reader.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use async_trait::async_trait;
use lettre::message::header::ContentType;
use lettre::message::Mailbox;
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{AsyncSmtpConnection, TlsParameters};
use lettre::transport::smtp::commands::{Data, Mail, Rcpt};
use lettre::transport::smtp::extension::ClientId;
use serde::{Deserialize, Serialize};

use super::guard::DestinationGuard;
use super::{Outcome, Sender};

/// The sender address when a route names none.
pub const DEFAULT_FROM: &str = "herald@localhost";

/// Placeholders a template may use: the run snapshot's fields, the dead-letter
/// notice's fields, the plain-text summary and the brand.
const PLACEHOLDERS: &[&str] = &[
    "event",
    "run_id",
    "type",
    "tenant",
    "status",
    "transition_seq",
    "finished_at",
    "result",
    "failed_event_id",
    "kind",
    "parent_type",
    "parent_id",
    "error",
    "text",
    "brand",
];

/// An e-mail event's frozen payload: where, to whom, the templates and the
/// snapshot they are rendered from; the credentials only by reference.
#[derive(Debug, Serialize, Deserialize)]
pub struct EmailPayload {
    pub url: String,
    pub to: Vec<String>,
    pub from: String,
    #[serde(default)]
    pub brand: Option<String>,
    #[serde(default)]
    pub subject: Option<String>,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<String>,
    /// The values the templates read (the run snapshot or a dead-letter notice).
    pub snapshot: serde_json::Value,
    /// The plain-text summary: the default body, and `{text}`.
    pub text: String,
}

/// Where an `smtp://` or `smtps://` URL points.
#[derive(Debug, Clone, PartialEq)]
pub struct SmtpTarget {
    pub host: String,
    pub port: u16,
    /// `smtps://`: TLS from the first byte; otherwise STARTTLS when offered.
    pub implicit_tls: bool,
}

impl SmtpTarget {
    pub fn parse(url: &str) -> Result<SmtpTarget, String> {
        let parsed = url::Url::parse(url).map_err(|e| format!("`url` is not a valid URL ({e})"))?;
        let implicit_tls = match parsed.scheme() {
            "smtp" => false,
            "smtps" => true,
            _ => return Err("`url` of an email route must use smtp:// or smtps://".into()),
        };
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(
                "`url` must not hold credentials; name them with `secret_ref` (user:password)"
                    .into(),
            );
        }
        if !matches!(parsed.path(), "" | "/") || parsed.query().is_some() {
            return Err("`url` of an email route is smtp[s]://host:port, with no path".into());
        }
        let host = match parsed.host() {
            Some(url::Host::Domain(d)) if !d.is_empty() => d.to_string(),
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            _ => return Err("`url` must name a host".into()),
        };
        let port = parsed.port().unwrap_or(if implicit_tls { 465 } else { 25 });
        Ok(SmtpTarget {
            host,
            port,
            implicit_tls,
        })
    }

    /// `smtp://host:port`: the destination's identity for health and display.
    pub fn origin(&self) -> String {
        let scheme = if self.implicit_tls { "smtps" } else { "smtp" };
        match self.host.parse::<IpAddr>() {
            Ok(IpAddr::V6(ip)) => format!("{scheme}://[{ip}]:{}", self.port),
            _ => format!("{scheme}://{}:{}", self.host, self.port),
        }
    }
}

/// One template piece: literal text or a placeholder's name.
enum Piece<'a> {
    Text(&'a str),
    Field(&'a str),
}

/// Splits `{name}` placeholders from text; `{{` and `}}` are literal braces.
fn pieces(template: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut out = Vec::new();
    let mut rest = template;
    while !rest.is_empty() {
        let Some(at) = rest.find(['{', '}']) else {
            out.push(Piece::Text(rest));
            break;
        };
        out.push(Piece::Text(&rest[..at]));
        let tail = &rest[at..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            out.push(Piece::Text(&tail[..1]));
            rest = &tail[2..];
        } else if let Some(name) = tail.strip_prefix('{') {
            let end = name
                .find('}')
                .ok_or_else(|| "a `{` is not closed (write `{{` for a brace)".to_string())?;
            out.push(Piece::Field(&name[..end]));
            rest = &name[end + 1..];
        } else {
            return Err("a `}` has no `{` (write `}}` for a brace)".into());
        }
    }
    Ok(out)
}

/// A template's shape and placeholder names, checked at configuration time.
pub fn check_template(template: &str) -> Result<(), String> {
    for piece in pieces(template)? {
        if let Piece::Field(name) = piece {
            if !PLACEHOLDERS.contains(&name) {
                return Err(format!(
                    "unknown placeholder {{{name}}}; known: {}",
                    PLACEHOLDERS.join(", ")
                ));
            }
        }
    }
    Ok(())
}

/// Renders `template` from the payload's values (a missing value is empty).
pub fn render(template: &str, payload: &EmailPayload) -> String {
    let Ok(parts) = pieces(template) else {
        return template.to_string();
    };
    let mut out = String::new();
    for piece in parts {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Field("text") => out.push_str(&payload.text),
            Piece::Field("brand") => out.push_str(payload.brand.as_deref().unwrap_or("")),
            Piece::Field(name) => match payload.snapshot.get(name) {
                Some(serde_json::Value::String(s)) => out.push_str(s),
                Some(serde_json::Value::Null) | None => {}
                Some(other) => out.push_str(&other.to_string()),
            },
        }
    }
    out
}

/// The message as it leaves: rendered subject and body, brand as display name.
pub fn build_message(event_id: &str, payload: &EmailPayload) -> Result<lettre::Message, String> {
    let from: lettre::Address = payload
        .from
        .parse()
        .map_err(|e| format!("sender address is not valid ({e})"))?;
    let subject = match &payload.subject {
        Some(template) => render(template, payload),
        None => payload.text.lines().next().unwrap_or("").to_string(),
    };
    // A header is one line, whatever the snapshot held.
    let subject: String = subject
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(250)
        .collect();
    let body = match &payload.body {
        Some(template) => render(template, payload),
        None => payload.text.clone(),
    };
    let mut builder = lettre::Message::builder()
        .from(Mailbox::new(payload.brand.clone(), from))
        .subject(subject)
        .message_id(Some(format!("<{event_id}@herald>")))
        .header(ContentType::TEXT_PLAIN);
    for to in &payload.to {
        let address: lettre::Address = to
            .parse()
            .map_err(|e| format!("recipient address is not valid ({e})"))?;
        builder = builder.to(Mailbox::new(None, address));
    }
    builder
        .body(body)
        .map_err(|e| format!("the message cannot be built ({e})"))
}

/// How far a conversation got: what a failure at that point means.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Progress {
    /// Nothing of the message left Herald: safe to retry or to stop.
    Envelope,
    /// The message data began to leave: without the server's final answer, it
    /// may have been accepted.
    DataSent,
}

/// A failed conversation step, classed by [`Progress`].
struct Failure {
    error: String,
    /// The server's reply code, when it answered.
    code: Option<u16>,
    /// Whether the server refused for good (5xx) or the setup is wrong.
    permanent: bool,
}

impl Failure {
    fn smtp(step: &str, err: lettre::transport::smtp::Error) -> Failure {
        let code = err.status().map(u16::from);
        Failure {
            permanent: err.is_permanent(),
            error: format!("SMTP {step}: {err}"),
            code,
        }
    }

    fn permanent(error: String) -> Failure {
        Failure {
            error,
            code: None,
            permanent: true,
        }
    }
}

pub struct EmailHandler {
    guard: DestinationGuard,
    /// The whole conversation's limit (connect to final reply).
    timeout: Duration,
}

impl EmailHandler {
    pub fn new(guard: DestinationGuard, timeout: Duration) -> Self {
        super::install_crypto_provider();
        EmailHandler { guard, timeout }
    }

    /// Sends `payload` as event `event_id`; see the module doc for the outcome classes.
    pub async fn deliver(&self, event_id: &str, payload: EmailPayload) -> Outcome {
        let target = match SmtpTarget::parse(&payload.url) {
            Ok(target) => target,
            Err(error) => {
                return Outcome::Permanent {
                    error,
                    status_code: None,
                }
            }
        };
        let message = match build_message(event_id, &payload) {
            Ok(message) => message,
            Err(error) => {
                return Outcome::Permanent {
                    error,
                    status_code: None,
                }
            }
        };
        let credentials = match payload.secret_ref.as_deref().map(credentials).transpose() {
            Ok(credentials) => credentials,
            // A missing secret may be provided later: nothing left the node, so the
            // e-mail waits without spending attempts or blaming the server.
            Err(error) => return Outcome::NotSent { error },
        };
        let mut progress = Progress::Envelope;
        let sent = tokio::time::timeout(
            self.timeout,
            self.converse(&target, &message, credentials.as_ref(), &mut progress),
        )
        .await;
        let failure = match sent {
            Ok(Ok(code)) => {
                return Outcome::Delivered {
                    status_code: Some(code),
                }
            }
            Ok(Err(failure)) => failure,
            Err(_) => Failure {
                error: format!("SMTP conversation timed out after {:?}", self.timeout),
                code: None,
                permanent: false,
            },
        };
        classify(failure, progress)
    }

    /// One SMTP conversation; returns the final reply's code.
    async fn converse(
        &self,
        target: &SmtpTarget,
        message: &lettre::Message,
        credentials: Option<&Credentials>,
        progress: &mut Progress,
    ) -> Result<u16, Failure> {
        let addresses = self.resolve(target).await?;
        let hello = ClientId::default();
        // Certificates are verified against the configured name, whatever address is dialled.
        let tls =
            || TlsParameters::new(target.host.clone()).map_err(|e| Failure::smtp("TLS set-up", e));
        let implicit = if target.implicit_tls {
            Some(tls()?)
        } else {
            None
        };
        let mut conn = AsyncSmtpConnection::connect_tokio1(
            addresses.as_slice(),
            Some(self.timeout),
            &hello,
            implicit,
            None,
        )
        .await
        .map_err(|e| Failure::smtp("connect", e))?;
        if !target.implicit_tls && conn.can_starttls() {
            conn.starttls(tls()?, &hello)
                .await
                .map_err(|e| Failure::smtp("STARTTLS", e))?;
        }
        if let Some(credentials) = credentials {
            if !conn.is_encrypted() {
                return Err(Failure::permanent(
                    "the SMTP server offers no TLS; credentials are never sent in the clear".into(),
                ));
            }
            conn.auth(&[Mechanism::Plain, Mechanism::Login], credentials)
                .await
                .map_err(|e| Failure::smtp("AUTH", e))?;
        }
        let envelope = message.envelope();
        conn.command(Mail::new(envelope.from().cloned(), vec![]))
            .await
            .map_err(|e| Failure::smtp("MAIL FROM", e))?;
        for to in envelope.to() {
            conn.command(Rcpt::new(to.clone(), vec![]))
                .await
                .map_err(|e| Failure::smtp("RCPT TO", e))?;
        }
        conn.command(Data)
            .await
            .map_err(|e| Failure::smtp("DATA", e))?;
        *progress = Progress::DataSent;
        let reply = conn
            .message(&message.formatted())
            .await
            .map_err(|e| Failure::smtp("message", e))?;
        // The message is accepted; a failed goodbye changes nothing.
        let _ = conn.quit().await;
        Ok(u16::from(reply.code()))
    }

    /// The target's addresses the destination guard allows.
    async fn resolve(&self, target: &SmtpTarget) -> Result<Vec<SocketAddr>, Failure> {
        let resolved: Vec<SocketAddr> = match target.host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, target.port)],
            Err(_) => tokio::net::lookup_host((target.host.as_str(), target.port))
                .await
                .map_err(|e| Failure {
                    error: format!("SMTP host did not resolve: {e}"),
                    code: None,
                    permanent: false,
                })?
                .collect(),
        };
        let mut refused = None;
        let allowed: Vec<SocketAddr> = resolved
            .into_iter()
            .filter(|addr| match self.guard.check(addr.ip()) {
                Ok(()) => true,
                Err(r) => {
                    refused = Some(r);
                    false
                }
            })
            .collect();
        match (allowed.is_empty(), refused) {
            (true, Some(refused)) => Err(Failure::permanent(refused.to_string())),
            (true, None) => Err(Failure {
                error: "SMTP host resolved to no address".into(),
                code: None,
                permanent: false,
            }),
            (false, _) => Ok(allowed),
        }
    }
}

/// `user:password` behind a reference.
fn credentials(reference: &str) -> Result<Credentials, String> {
    let text = super::secrets::resolve_text(reference).map_err(|e| match e {
        super::secrets::SecretError::Missing(r) => format!("SMTP credentials {r} are not set"),
        other => format!("SMTP credentials unreadable: {}", other),
    })?;
    let (user, password) = text
        .trim_end_matches(['\r', '\n'])
        .split_once(':')
        .ok_or_else(|| format!("SMTP credentials {reference} are not user:password"))?;
    Ok(Credentials::new(user.to_string(), password.to_string()))
}

/// A failure's outcome class, given how far the conversation got.
fn classify(failure: Failure, progress: Progress) -> Outcome {
    let Failure {
        error,
        code,
        permanent,
    } = failure;
    if code.is_none() && progress == Progress::DataSent {
        // The data left and no answer came back: it may have been accepted.
        return Outcome::Uncertain {
            error: format!("{error} (after the message data was sent; it may have been delivered)"),
            status_code: None,
        };
    }
    if permanent {
        Outcome::Permanent {
            error,
            status_code: code,
        }
    } else {
        Outcome::Retryable {
            error,
            status_code: code,
            retry_after: None,
        }
    }
}

#[async_trait]
impl Sender for EmailHandler {
    async fn send(&self, event_id: &str, payload: &str) -> Outcome {
        match super::read_payload(payload, "email") {
            Ok(payload) => self.deliver(event_id, payload).await,
            Err(outcome) => outcome,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(subject: Option<&str>, body: Option<&str>) -> EmailPayload {
        EmailPayload {
            url: "smtp://mail.example.com:2525".into(),
            to: vec!["ops@example.com".into()],
            from: "herald@example.com".into(),
            brand: Some("Acme Jobs".into()),
            subject: subject.map(str::to_string),
            body: body.map(str::to_string),
            secret_ref: None,
            snapshot: serde_json::json!({"run_id": "r1", "status": "succeeded", "transition_seq": 2, "result": {"n": 1}}),
            text: "Run r1 succeeded.\nmore".into(),
        }
    }

    #[test]
    fn templates_render_snapshot_fields_and_literal_braces() {
        let p = payload(None, None);
        assert_eq!(
            render("{brand}: run {run_id} {status} #{transition_seq} {{x}}", &p),
            "Acme Jobs: run r1 succeeded #2 {x}"
        );
        assert_eq!(render("{result}|{tenant}", &p), r#"{"n":1}|"#);
        assert!(check_template("{run_id} {text}").is_ok());
        assert!(check_template("{nope}").unwrap_err().contains("nope"));
        assert!(check_template("{run_id").is_err());
        assert!(check_template("a } b").is_err());
    }

    #[test]
    fn the_message_carries_brand_subject_body_and_event_id() {
        let message = build_message(
            "deliver_r1_mail",
            &payload(Some("Run {run_id}\r\nBcc: x@y"), None),
        )
        .unwrap();
        let text = String::from_utf8(message.formatted()).unwrap();
        assert!(
            text.contains("From: \"Acme Jobs\" <herald@example.com>"),
            "{text}"
        );
        assert!(text.contains("Subject: Run r1  Bcc: x@y"), "{text}");
        assert!(!text.contains("\r\nBcc:"), "{text}");
        assert!(
            text.contains("Message-ID: <deliver_r1_mail@herald>"),
            "{text}"
        );
        assert!(text.contains("Run r1 succeeded."), "{text}");
    }

    #[test]
    fn smtp_urls_are_checked() {
        let t = SmtpTarget::parse("smtps://mail.example.com").unwrap();
        assert_eq!((t.port, t.implicit_tls), (465, true));
        assert_eq!(t.origin(), "smtps://mail.example.com:465");
        assert_eq!(
            SmtpTarget::parse("smtp://[::1]:2525").unwrap().origin(),
            "smtp://[::1]:2525"
        );
        assert!(SmtpTarget::parse("https://mail.example.com").is_err());
        assert!(SmtpTarget::parse("smtp://u:p@mail.example.com")
            .unwrap_err()
            .contains("secret_ref"));
        assert!(SmtpTarget::parse("smtp://mail.example.com/x").is_err());
    }

    #[test]
    fn failures_are_classed_by_how_far_they_got() {
        let lost = || Failure {
            error: "network".into(),
            code: None,
            permanent: false,
        };
        assert!(matches!(
            classify(lost(), Progress::Envelope),
            Outcome::Retryable { .. }
        ));
        assert!(matches!(
            classify(lost(), Progress::DataSent),
            Outcome::Uncertain { .. }
        ));
        let refused = Failure {
            error: "554".into(),
            code: Some(554),
            permanent: true,
        };
        assert!(matches!(
            classify(refused, Progress::DataSent),
            Outcome::Permanent {
                status_code: Some(554),
                ..
            }
        ));
    }
}
