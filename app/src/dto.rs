//! Types shared by the server and the browser: roles, permissions, the signed-in
//! viewer, and the run views the console shows.

use serde::{Deserialize, Serialize};

/// What a principal may do (DESIGN §7). Checked in the server's service layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Permission {
    RunsRead,
    RunsWrite,
    UsersManage,
    DataRead,
    RecordsRead,
    RecordsWrite,
    ApprovalsSubmit,
    DefinitionsManage,
}

impl Permission {
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::RunsRead => "runs:read",
            Permission::RunsWrite => "runs:write",
            Permission::UsersManage => "users:manage",
            Permission::DataRead => "data:read",
            Permission::RecordsRead => "records:read",
            Permission::RecordsWrite => "records:write",
            Permission::ApprovalsSubmit => "approvals:submit",
            Permission::DefinitionsManage => "definitions:manage",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Reader,
    Operator,
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Reader, Role::Operator, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Reader => "reader",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(value: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|role| role.as_str() == value)
    }

    pub fn permissions(self) -> &'static [Permission] {
        use Permission::*;
        match self {
            Role::Reader => &[RunsRead, RecordsRead],
            Role::Operator => &[
                RunsRead,
                RecordsRead,
                RunsWrite,
                RecordsWrite,
                ApprovalsSubmit,
            ],
            Role::Admin => &[
                RunsRead,
                RecordsRead,
                RunsWrite,
                RecordsWrite,
                ApprovalsSubmit,
                UsersManage,
                DefinitionsManage,
                DataRead,
            ],
        }
    }

    pub fn can(self, permission: Permission) -> bool {
        self.permissions().contains(&permission)
    }
}

/// Who is making a request: a signed-in user or an API token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Viewer {
    pub name: String,
    pub role: Role,
}

impl Viewer {
    pub fn can(&self, permission: Permission) -> bool {
        self.role.can(permission)
    }
}

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

/// A run as a reader may see it: no result snapshot, the callback reduced to its origin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSummary {
    pub id: String,
    pub run_type: String,
    pub tenant: String,
    pub status: RunStatus,
    pub callback_origin: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// Filters and cursor of one page of the runs list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunQuery {
    pub run_type: Option<String>,
    pub status: Option<RunStatus>,
    /// Keyset cursor: the id of the last run on the previous page.
    pub after: Option<String>,
    pub limit: Option<u32>,
}

impl RunQuery {
    pub const DEFAULT_LIMIT: u32 = 50;
    pub const MAX_LIMIT: u32 = 200;

    pub fn effective_limit(&self) -> u32 {
        self.limit
            .unwrap_or(Self::DEFAULT_LIMIT)
            .clamp(1, Self::MAX_LIMIT)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunPage {
    pub runs: Vec<RunSummary>,
    /// Present when more runs follow this page.
    pub next_cursor: Option<String>,
    /// Every run type known to the store, for the filter.
    pub run_types: Vec<String>,
}

/// Where an owed side effect (an outbox event) stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
