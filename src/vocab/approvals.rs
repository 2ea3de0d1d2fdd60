//! The approvals source's data: process definitions (steps, approvers, lifecycle
//! actions), approval instances with their nodes and work items, and the frozen
//! payloads of the events a lifecycle transition owes.

use crate::roles::{Role, Viewer};
use serde::{Deserialize, Serialize};

/// The lifecycle events of an approval (DESIGN §1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LifecycleEvent {
    Submit,
    Approve,
    Reject,
    Recall,
}

impl LifecycleEvent {
    pub const ALL: [LifecycleEvent; 4] = [
        LifecycleEvent::Submit,
        LifecycleEvent::Approve,
        LifecycleEvent::Reject,
        LifecycleEvent::Recall,
    ];

    /// The event whose [`LifecycleEvent::label`] is `label`.
    pub fn from_label(label: &str) -> Option<LifecycleEvent> {
        Self::ALL.into_iter().find(|e| e.label() == label)
    }

    /// The id of the FieldUpdate replay event this event owes:
    /// `<label>_<approval id>_<transition seq>`, e.g. `recall_<id>_3`.
    pub fn replay_id(self, approval_id: &str, transition_seq: i64) -> String {
        format!("{}_{approval_id}_{transition_seq}", self.label())
    }

    /// The lifecycle event a replay event's id names ([`LifecycleEvent::replay_id`]).
    pub fn of_replay_id(event_id: &str) -> Option<LifecycleEvent> {
        Self::from_label(event_id.split('_').next()?)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LifecycleEvent::Submit => "Submit",
            LifecycleEvent::Approve => "Approve",
            LifecycleEvent::Reject => "Reject",
            LifecycleEvent::Recall => "Recall",
        }
    }

    /// The metric label (lower case, fixed set).
    pub fn label(self) -> &'static str {
        match self {
            LifecycleEvent::Submit => "submit",
            LifecycleEvent::Approve => "approve",
            LifecycleEvent::Reject => "reject",
            LifecycleEvent::Recall => "recall",
        }
    }
}

/// Who decides a step: a named user, or any member of a role.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Approver {
    User(String),
    Role(Role),
}

impl Approver {
    pub fn kind(&self) -> &'static str {
        match self {
            Approver::User(_) => "user",
            Approver::Role(_) => "role",
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Approver::User(name) => name,
            Approver::Role(role) => role.as_str(),
        }
    }

    pub fn from_parts(kind: &str, name: &str) -> Option<Approver> {
        match kind {
            "user" => Some(Approver::User(name.to_string())),
            "role" => Role::parse(name).map(Approver::Role),
            _ => None,
        }
    }

    pub fn includes(&self, viewer: &Viewer) -> bool {
        match self {
            Approver::User(name) => *name == viewer.name,
            Approver::Role(role) => *role == viewer.role,
        }
    }
}

/// One approval step.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub name: String,
    pub approver: Approver,
    /// The configured route the approval prompt goes to (none: no prompt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
}

/// A lifecycle action (seed 000): a field update (the path may cross lookups,
/// `Account.Status`) or an alert to a configured route.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum Action {
    FieldUpdate {
        id: String,
        #[serde(default)]
        name: String,
        field_path: String,
        value: serde_json::Value,
    },
    Alert {
        id: String,
        #[serde(default)]
        name: String,
        route: String,
    },
}

impl Action {
    pub fn id(&self) -> &str {
        match self {
            Action::FieldUpdate { id, .. } | Action::Alert { id, .. } => id,
        }
    }
}

/// Actions per lifecycle event.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LifecycleActions {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub submit: Vec<Action>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approve: Vec<Action>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reject: Vec<Action>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recall: Vec<Action>,
}

impl LifecycleActions {
    pub fn for_event(&self, event: LifecycleEvent) -> &[Action] {
        match event {
            LifecycleEvent::Submit => &self.submit,
            LifecycleEvent::Approve => &self.approve,
            LifecycleEvent::Reject => &self.reject,
            LifecycleEvent::Recall => &self.recall,
        }
    }

    fn all(&self) -> impl Iterator<Item = &Action> {
        self.submit
            .iter()
            .chain(&self.approve)
            .chain(&self.reject)
            .chain(&self.recall)
    }
}

/// What a definition's instances approve: records of one object (seed 000), or
/// runs paused for approval (seed 003, DESIGN §9).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    #[default]
    Record,
    Run,
}

/// The object a run approval's instance names (its `record_id` is the run's id).
/// A `_System_` name: generic record CRUD can never reach it.
pub const RUN_OBJECT: &str = "_System_Run";

/// A process definition as written in the config file (`[[approval_definitions]]`)
/// or posted to `POST /api/v1/approval-definitions`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DefinitionSpec {
    pub id: String,
    #[serde(default)]
    pub target: Target,
    /// The object API name its instances approve records of (record targets only).
    #[serde(default)]
    pub object: String,
    /// The run types it may approve (run targets only; empty: every type).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run_types: Vec<String>,
    pub steps: Vec<Step>,
    #[serde(default)]
    pub actions: LifecycleActions,
}

/// One stored version of a definition.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Definition {
    pub id: String,
    pub version: i64,
    /// The records' object, or [`RUN_OBJECT`] for a definition that targets runs.
    pub object: String,
    /// The run types a run definition approves (empty: every type).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run_types: Vec<String>,
    pub steps: Vec<Step>,
    pub actions: LifecycleActions,
    pub created_by: String,
    pub created_at_ms: i64,
}

impl Definition {
    pub fn target(&self) -> Target {
        if self.object == RUN_OBJECT {
            Target::Run
        } else {
            Target::Record
        }
    }

    /// Whether a run of `run_type` may ask this definition for approval.
    pub fn admits_run_type(&self, run_type: &str) -> bool {
        self.target() == Target::Run
            && (self.run_types.is_empty() || self.run_types.iter().any(|t| t == run_type))
    }
}

/// An object API name or field name: a letter, then letters, digits or `_`.
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 64
}

/// System objects are never reachable through generic record CRUD.
pub fn is_system_object(object: &str) -> bool {
    object.starts_with("_System_")
}

impl DefinitionSpec {
    /// The object column it is stored under: its records' object, or
    /// [`RUN_OBJECT`] when it targets runs.
    pub fn stored_object(&self) -> &str {
        match self.target {
            Target::Record => &self.object,
            Target::Run => RUN_OBJECT,
        }
    }

    /// Checks the shape; `has_route` says whether a route name is configured.
    /// Errors name the offending part.
    pub fn validate(&self, has_route: impl Fn(&str) -> bool) -> Result<(), (String, String)> {
        let err = |what: &str, msg: String| Err((what.to_string(), msg));
        if self.id.is_empty()
            || self.id.len() > 128
            || !self
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return err(
                "id",
                "must be 1 to 128 letters, digits, '_' or '-'".to_string(),
            );
        }
        match self.target {
            Target::Record => self.validate_record_target()?,
            Target::Run => self.validate_run_target()?,
        }
        if self.steps.is_empty() {
            return err("steps", "a definition needs at least one step".into());
        }
        self.validate_steps_and_actions(has_route)
    }

    fn validate_record_target(&self) -> Result<(), (String, String)> {
        let err = |what: &str, msg: String| Err((what.to_string(), msg));
        if !self.run_types.is_empty() {
            return err(
                "run_types",
                "only a definition with target = \"run\" names run types".to_string(),
            );
        }
        if !valid_name(&self.object) || is_system_object(&self.object) {
            return err(
                "object",
                format!(
                    "{:?} is not an object API name records can have",
                    self.object
                ),
            );
        }
        Ok(())
    }

    /// A run definition names no object and updates no field (a run has none):
    /// its actions are alerts.
    fn validate_run_target(&self) -> Result<(), (String, String)> {
        let err = |what: &str, msg: String| Err((what.to_string(), msg));
        if !self.object.is_empty() && self.object != RUN_OBJECT {
            return err(
                "object",
                format!(
                    "a definition with target = \"run\" approves runs, not {:?} records; leave object out",
                    self.object
                ),
            );
        }
        if let Some(bad) = self
            .run_types
            .iter()
            .find(|t| t.trim().is_empty() || t.len() > 64)
        {
            return err(
                "run_types",
                format!("run type {bad:?} must be 1 to 64 characters"),
            );
        }
        if self
            .actions
            .all()
            .any(|a| matches!(a, Action::FieldUpdate { .. }))
        {
            return err(
                "actions",
                "a definition with target = \"run\" can only have Alert actions: a run has no fields to update".to_string(),
            );
        }
        Ok(())
    }

    fn validate_steps_and_actions(
        &self,
        has_route: impl Fn(&str) -> bool,
    ) -> Result<(), (String, String)> {
        let err = |what: &str, msg: String| Err((what.to_string(), msg));
        for (i, step) in self.steps.iter().enumerate() {
            if step.name.trim().is_empty() {
                return err("steps", format!("step {} has no name", i + 1));
            }
            if let Approver::User(name) = &step.approver {
                if name.trim().is_empty() {
                    return err("steps", format!("step {:?} names no approver", step.name));
                }
            }
            if let Some(route) = &step.route {
                if !has_route(route) {
                    return err(
                        "steps",
                        format!("step {:?}: no route is named {route:?}", step.name),
                    );
                }
            }
        }
        let mut ids = std::collections::HashSet::new();
        for action in self.actions.all() {
            if action.id().is_empty() || !ids.insert(action.id().to_string()) {
                return err(
                    "actions",
                    format!("action ids must be present and unique ({:?})", action.id()),
                );
            }
            match action {
                Action::FieldUpdate { field_path, .. } => {
                    if field_path.split('.').any(|part| !valid_name(part)) {
                        return err(
                            "actions",
                            format!(
                                "field_path {field_path:?} is not a dotted path of field names"
                            ),
                        );
                    }
                }
                Action::Alert { route, .. } => {
                    if !has_route(route) {
                        return err("actions", format!("no route is named {route:?}"));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Where an approval instance stands.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstanceStatus {
    Pending,
    Approved,
    Rejected,
    Removed,
}

impl InstanceStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceStatus::Pending => "pending",
            InstanceStatus::Approved => "approved",
            InstanceStatus::Rejected => "rejected",
            InstanceStatus::Removed => "removed",
        }
    }

    pub fn parse(value: &str) -> Option<InstanceStatus> {
        [
            InstanceStatus::Pending,
            InstanceStatus::Approved,
            InstanceStatus::Rejected,
            InstanceStatus::Removed,
        ]
        .into_iter()
        .find(|s| s.as_str() == value)
    }
}

/// A process instance.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    pub id: String,
    pub definition_id: String,
    pub definition_version: i64,
    pub object: String,
    pub record_id: String,
    pub status: InstanceStatus,
    pub step_index: i64,
    pub submitted_by: String,
    pub decided_by: Option<String>,
    pub transition_seq: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Node {
    pub id: String,
    pub step_index: i64,
    pub step_name: String,
    pub status: InstanceStatus,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorkItem {
    pub id: String,
    pub node_id: String,
    pub approver_kind: String,
    pub approver: String,
    pub status: InstanceStatus,
    pub decided_by: Option<String>,
}

/// Who caused a lifecycle transition, frozen into the events it owes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ActorSnapshot {
    pub name: String,
    pub role: Role,
}

/// The concrete record, field and object a FieldUpdate writes, resolved when the
/// lifecycle transition committed (lookups are never re-resolved later).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrozenTarget {
    pub object: String,
    pub record_id: String,
    pub field: String,
}

/// One FieldUpdate instruction of a replay event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayInstruction {
    pub action_id: String,
    pub action_name: String,
    pub field_path: String,
    pub value: serde_json::Value,
    pub target: FrozenTarget,
}

/// The frozen payload of a `field_update` replay event (seed 000 "Contract").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayPayload {
    pub lifecycle_event: LifecycleEvent,
    pub process_instance_id: String,
    pub definition_id: String,
    pub definition_version: i64,
    pub object: String,
    pub record_id: String,
    pub actor: ActorSnapshot,
    pub instructions: Vec<ReplayInstruction>,
}

/// Where a transition's FieldUpdates stand, as the API and the console say it
/// (docs/ORDERING.md §5): they are written by their replay event after the
/// transition answers, in their record's lane.
pub fn field_update_state(status: crate::DeliveryStatus) -> &'static str {
    use crate::DeliveryStatus::*;
    match status {
        Pending | Processing => "applying",
        Completed => "applied",
        Failed | Uncertain => "blocked",
        Skipped => "skipped",
    }
}

/// Event kinds of the approvals source.
pub mod kinds {
    pub const APPROVAL_PROMPT: &str = "approval_prompt";
    pub const ALERT: &str = "alert";
    pub const FIELD_UPDATE: &str = "field_update";
}

/// The parent type of every approvals event.
pub const PARENT_TYPE: &str = "approval";

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> DefinitionSpec {
        DefinitionSpec {
            id: "deal".into(),
            target: Target::Record,
            object: "Opportunity".into(),
            run_types: Vec::new(),
            steps: vec![Step {
                name: "Manager".into(),
                approver: Approver::Role(Role::Admin),
                route: None,
            }],
            actions: LifecycleActions {
                recall: vec![Action::FieldUpdate {
                    id: "a1".into(),
                    name: "reopen".into(),
                    field_path: "Account.Status".into(),
                    value: serde_json::json!("Open"),
                }],
                ..Default::default()
            },
        }
    }

    #[test]
    fn definitions_are_checked_with_messages_naming_the_part() {
        assert!(spec().validate(|_| true).is_ok());
        let mut bad = spec();
        bad.object = "_System_ApprovalActionOutbox".into();
        assert_eq!(bad.validate(|_| true).unwrap_err().0, "object");
        let mut bad = spec();
        bad.actions.recall.push(Action::Alert {
            id: "a1".into(),
            name: String::new(),
            route: "ops".into(),
        });
        assert_eq!(bad.validate(|_| true).unwrap_err().0, "actions");
        let mut bad = spec();
        bad.actions.recall = vec![Action::FieldUpdate {
            id: "x".into(),
            name: String::new(),
            field_path: "Account..Status".into(),
            value: serde_json::Value::Null,
        }];
        assert!(bad.validate(|_| true).unwrap_err().1.contains("field_path"));
    }

    #[test]
    fn a_run_definition_names_no_object_and_updates_no_field() {
        let run: DefinitionSpec = serde_json::from_str(
            r#"{"id":"payout","target":"run","run_types":["payout"],
                "steps":[{"name":"Finance","approver":{"role":"admin"}}]}"#,
        )
        .unwrap();
        assert!(run.validate(|_| true).is_ok());
        assert_eq!(run.stored_object(), RUN_OBJECT);
        let mut bad = run.clone();
        bad.object = "Opportunity".into();
        assert_eq!(bad.validate(|_| true).unwrap_err().0, "object");
        let mut bad = run.clone();
        bad.actions.approve.push(Action::FieldUpdate {
            id: "f".into(),
            name: String::new(),
            field_path: "Status".into(),
            value: serde_json::json!("x"),
        });
        let (part, message) = bad.validate(|_| true).unwrap_err();
        assert_eq!(part, "actions");
        assert!(message.contains("only have Alert actions"), "{message}");
        let mut bad = spec();
        bad.run_types = vec!["payout".into()];
        assert_eq!(bad.validate(|_| true).unwrap_err().0, "run_types");
        let stored = Definition {
            id: "payout".into(),
            version: 1,
            object: RUN_OBJECT.into(),
            run_types: vec!["payout".into()],
            steps: run.steps.clone(),
            actions: LifecycleActions::default(),
            created_by: "config".into(),
            created_at_ms: 0,
        };
        assert!(stored.admits_run_type("payout"));
        assert!(!stored.admits_run_type("etl"));
        let record = Definition {
            object: "Opportunity".into(),
            run_types: Vec::new(),
            ..stored
        };
        assert!(!record.admits_run_type("payout"));
    }

    #[test]
    fn approvers_parse_from_toml_and_json() {
        let step: Step =
            toml::from_str("name = \"m\"\napprover = { role = \"operator\" }\n").unwrap();
        assert_eq!(step.approver, Approver::Role(Role::Operator));
        let step: Step = serde_json::from_str(r#"{"name":"m","approver":{"user":"bob"}}"#).unwrap();
        assert_eq!(step.approver, Approver::User("bob".into()));
    }
}
