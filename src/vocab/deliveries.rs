//! Where an owed side effect stands: the delivery states, what they mean to an
//! operator, and the filters over them.

use serde::{Deserialize, Serialize};

/// Where an owed side effect (an outbox event) stands.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    Pending,
    Processing,
    Completed,
    Skipped,
    Failed,
    Uncertain,
}

impl DeliveryStatus {
    pub const ALL: [DeliveryStatus; 6] = [
        DeliveryStatus::Pending,
        DeliveryStatus::Processing,
        DeliveryStatus::Completed,
        DeliveryStatus::Skipped,
        DeliveryStatus::Failed,
        DeliveryStatus::Uncertain,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Processing => "processing",
            DeliveryStatus::Completed => "completed",
            DeliveryStatus::Skipped => "skipped",
            DeliveryStatus::Failed => "failed",
            DeliveryStatus::Uncertain => "uncertain",
        }
    }

    pub fn parse(value: &str) -> Option<DeliveryStatus> {
        DeliveryStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == value)
    }
}

impl DeliveryStatus {
    pub fn label(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "Pending",
            DeliveryStatus::Processing => "Processing",
            DeliveryStatus::Completed => "Completed",
            DeliveryStatus::Skipped => "Skipped",
            DeliveryStatus::Failed => "Failed",
            DeliveryStatus::Uncertain => "Uncertain",
        }
    }

    /// How much a state needs an operator: the worst state of a run's deliveries is
    /// the one its badge shows.
    pub fn severity(self) -> u8 {
        match self {
            DeliveryStatus::Completed => 0,
            DeliveryStatus::Skipped => 1,
            DeliveryStatus::Pending | DeliveryStatus::Processing => 2,
            DeliveryStatus::Failed => 3,
            DeliveryStatus::Uncertain => 4,
        }
    }

    /// The states an operator may retry from.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            DeliveryStatus::Failed | DeliveryStatus::Skipped | DeliveryStatus::Uncertain
        )
    }
}

/// Which deliveries a list is narrowed to: one state, or every run or event that
/// needs an operator (any `failed` or `uncertain`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryFilter {
    NeedsAttention,
    State(DeliveryStatus),
}

impl DeliveryFilter {
    pub const NEEDS_ATTENTION: &'static str = "needs_attention";

    pub fn parse(value: &str) -> Option<DeliveryFilter> {
        if value == Self::NEEDS_ATTENTION {
            Some(DeliveryFilter::NeedsAttention)
        } else {
            DeliveryStatus::parse(value).map(DeliveryFilter::State)
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryFilter::NeedsAttention => Self::NEEDS_ATTENTION,
            DeliveryFilter::State(status) => status.as_str(),
        }
    }

    /// The states this filter matches.
    pub fn states(self) -> Vec<DeliveryStatus> {
        match self {
            DeliveryFilter::NeedsAttention => {
                vec![DeliveryStatus::Failed, DeliveryStatus::Uncertain]
            }
            DeliveryFilter::State(status) => vec![status],
        }
    }
}

/// In the OpenAPI document: the text a filter parameter takes (what
/// [`DeliveryFilter::parse`] reads), not its serde form.
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for DeliveryFilter {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        // Empty is no filter (what a form's "any" sends).
        let mut values = vec!["", Self::NEEDS_ATTENTION];
        values.extend(DeliveryStatus::ALL.iter().map(|status| status.as_str()));
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(values))
            .description(Some(
                "A delivery state, `needs_attention` (failed or uncertain), or empty for any",
            ))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for DeliveryFilter {
    fn name() -> std::borrow::Cow<'static, str> {
        "DeliveryFilter".into()
    }
}

/// The destination under which the overview's rollups sum the failures of the
/// destinations past the most failing few of a minute (a name no origin has).
pub const OTHER_DESTINATIONS: &str = "*";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_filters_parse_needs_attention_or_one_state() {
        assert_eq!(
            DeliveryFilter::parse("needs_attention").map(DeliveryFilter::states),
            Some(vec![DeliveryStatus::Failed, DeliveryStatus::Uncertain])
        );
        assert_eq!(
            DeliveryFilter::parse("skipped"),
            Some(DeliveryFilter::State(DeliveryStatus::Skipped))
        );
        assert_eq!(DeliveryFilter::parse("sideways"), None);
        for status in DeliveryStatus::ALL {
            assert_eq!(
                DeliveryFilter::parse(status.as_str()).map(DeliveryFilter::as_str),
                Some(status.as_str())
            );
            assert_eq!(
                status.is_retryable(),
                matches!(
                    status,
                    DeliveryStatus::Failed | DeliveryStatus::Skipped | DeliveryStatus::Uncertain
                )
            );
        }
    }

    #[test]
    fn delivery_states_and_filters_keep_their_serialized_forms() {
        for status in DeliveryStatus::ALL {
            assert_eq!(
                serde_json::to_string(&status).unwrap(),
                format!("\"{}\"", status.as_str())
            );
        }
        assert_eq!(
            serde_json::to_string(&DeliveryFilter::NeedsAttention).unwrap(),
            "\"needs_attention\""
        );
        let state = DeliveryFilter::State(DeliveryStatus::Uncertain);
        let json = serde_json::to_string(&state).unwrap();
        assert_eq!(json, r#"{"state":"uncertain"}"#);
        assert_eq!(
            serde_json::from_str::<DeliveryFilter>(&json).unwrap(),
            state
        );
    }
}
