//! The run lifecycle: a run's states and the moves between them.

use serde::{Deserialize, Serialize};

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Queued,
    Running,
    AwaitingApproval,
    Succeeded,
    Failed,
    Cancelled,
}

impl RunStatus {
    pub const ALL: [RunStatus; 6] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::AwaitingApproval,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::AwaitingApproval => "awaiting_approval",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(value: &str) -> Option<RunStatus> {
        RunStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == value)
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Succeeded | RunStatus::Failed | RunStatus::Cancelled
        )
    }

    /// The run lifecycle: terminal states are final; nothing returns to `queued`.
    pub fn can_transition_to(self, to: RunStatus) -> bool {
        use RunStatus::*;
        match (self, to) {
            (_, Queued) => false,
            (from, _) if from.is_terminal() => false,
            (Queued, _) => true,
            (Running, Running) => false,
            (Running, _) => true,
            (AwaitingApproval, AwaitingApproval) => false,
            (AwaitingApproval, _) => true,
            _ => false,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            RunStatus::Queued => "Queued",
            RunStatus::Running => "Running",
            RunStatus::AwaitingApproval => "Awaiting approval",
            RunStatus::Succeeded => "Succeeded",
            RunStatus::Failed => "Failed",
            RunStatus::Cancelled => "Cancelled",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_states_are_final_and_nothing_returns_to_queued() {
        use RunStatus::*;
        let allowed: Vec<(RunStatus, RunStatus)> = RunStatus::ALL
            .into_iter()
            .flat_map(|from| RunStatus::ALL.into_iter().map(move |to| (from, to)))
            .filter(|(from, to)| from.can_transition_to(*to))
            .collect();
        assert_eq!(
            allowed,
            vec![
                (Queued, Running),
                (Queued, AwaitingApproval),
                (Queued, Succeeded),
                (Queued, Failed),
                (Queued, Cancelled),
                (Running, AwaitingApproval),
                (Running, Succeeded),
                (Running, Failed),
                (Running, Cancelled),
                (AwaitingApproval, Running),
                (AwaitingApproval, Succeeded),
                (AwaitingApproval, Failed),
                (AwaitingApproval, Cancelled),
            ]
        );
        assert_eq!(
            RunStatus::ALL.map(RunStatus::is_terminal),
            [false, false, false, true, true, true]
        );
    }

    #[test]
    fn run_states_keep_their_names() {
        for status in RunStatus::ALL {
            assert_eq!(RunStatus::parse(status.as_str()), Some(status));
            assert_eq!(
                serde_json::to_string(&status).unwrap(),
                format!("\"{}\"", status.as_str())
            );
        }
        assert_eq!(RunStatus::parse("Queued"), None);
    }
}
