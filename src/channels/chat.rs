//! Chat robot delivery (Slack incoming-webhook JSON: `{"text", "username"}`), split
//! into the robot's size limit. Chat cannot deduplicate, so once anything may have
//! been posted, a failure is `uncertain`, never an automatic resend.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::guard::DestinationGuard;
use super::webhook::{check_literal_host, classify};
use super::{Outcome, Sender};

/// A chat event's frozen payload.
#[derive(Debug, Serialize, Deserialize)]
pub struct ChatPayload {
    pub url: String,
    pub text: String,
    #[serde(default)]
    pub brand: Option<String>,
}

pub struct ChatHandler {
    client: reqwest::Client,
    guard: DestinationGuard,
    max_chars: usize,
}

impl ChatHandler {
    pub fn new(client: reqwest::Client, guard: DestinationGuard, max_chars: usize) -> Self {
        ChatHandler {
            client,
            guard,
            max_chars: max_chars.max(1),
        }
    }
}

/// Splits `text` into pieces of at most `max` characters, preferring line breaks.
pub fn split_text(text: &str, max: usize) -> Vec<String> {
    let mut chunks = Vec::new();
    let mut current = String::new();
    let mut count = 0;
    for line in text.split_inclusive('\n') {
        for ch in line.chars() {
            if count == max {
                chunks.push(std::mem::take(&mut current));
                count = 0;
            }
            current.push(ch);
            count += 1;
        }
        // Start a new chunk at a line break when the next line would not fit whole.
        if count > 0 && count * 4 >= max * 3 {
            chunks.push(std::mem::take(&mut current));
            count = 0;
        }
    }
    if !current.is_empty() || chunks.is_empty() {
        chunks.push(current);
    }
    chunks
}

#[async_trait]
impl Sender for ChatHandler {
    async fn send(&self, _event_id: &str, payload: &str) -> Outcome {
        match super::read_payload(payload, "chat") {
            Ok(payload) => self.deliver(payload).await,
            Err(outcome) => outcome,
        }
    }
}

impl ChatHandler {
    /// Posts `payload`'s text in parts; see the module doc for what a failure means.
    pub async fn deliver(&self, payload: ChatPayload) -> Outcome {
        if let Err(error) = check_literal_host(&payload.url, &self.guard) {
            return Outcome::Permanent {
                error,
                status_code: None,
            };
        }
        let chunks = split_text(&payload.text, self.max_chars);
        let total = chunks.len();
        for (index, chunk) in chunks.into_iter().enumerate() {
            let mut message = serde_json::json!({ "text": chunk });
            if let Some(brand) = &payload.brand {
                message["username"] = serde_json::Value::String(brand.clone());
            }
            let sent = self.client.post(&payload.url).json(&message).send().await;
            let not_sent = matches!(&sent, Err(e) if e.is_connect());
            match classify(sent) {
                Outcome::Delivered { .. } => continue,
                // Nothing left us yet: safe to try again or to stop.
                outcome @ (Outcome::Retryable { .. } | Outcome::Permanent { .. })
                    if index == 0 && (not_sent || outcome.status_code().is_some()) =>
                {
                    return outcome
                }
                outcome => {
                    return Outcome::Uncertain {
                        error: format!(
                            "chat delivery stopped after {index} of {total} parts: {}",
                            outcome.error().unwrap_or("unknown outcome")
                        ),
                        status_code: outcome.status_code(),
                    }
                }
            }
        }
        Outcome::Delivered { status_code: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_splits_within_the_limit_and_loses_nothing() {
        let text = (0..200).map(|i| format!("line {i}\n")).collect::<String>();
        let chunks = split_text(&text, 100);
        assert!(chunks.len() > 1);
        assert!(chunks.iter().all(|c| c.chars().count() <= 100));
        assert_eq!(chunks.concat(), text);
        assert_eq!(split_text("short", 100), vec!["short".to_string()]);
        let unbroken = "x".repeat(250);
        assert_eq!(split_text(&unbroken, 100).concat(), unbroken);
    }
}
