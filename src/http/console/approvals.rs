//! The server's implementation of the Approvals page's port
//! (`app::port::ApprovalsPort`) over the approvals service and the one
//! retry entry point.

use async_trait::async_trait;

use app::dto::{
    ApprovalDetailView, ApprovalEventRow, ApprovalRow, FailedReplayRow, ReplayShelfView,
    TimelineEntry,
};
use app::port::{ApprovalsPort, ConsoleError};
use vocab::{DeliveryStatus, Permission, Role, Viewer};

use crate::approvals::model::kinds;
use crate::http::error::console_error;
use crate::service::approvals::{ApprovalDetail, ApprovalService, ApprovalView, Decision};
use crate::service::deliveries::{DeliveryService, RetryRequest};
use crate::service::idempotency::IdempotencyKey;
use crate::service::ServiceError;

pub struct ApprovalsConsole {
    pub approvals: ApprovalService,
    pub deliveries: DeliveryService,
}

fn row(view: ApprovalView) -> ApprovalRow {
    ApprovalRow {
        id: view.id,
        definition_id: view.definition_id,
        definition_version: view.definition_version,
        object: view.object,
        record_id: view.record_id,
        status: view.status.as_str().to_string(),
        step: view.step,
        submitted_by: view.submitted_by,
        decided_by: view.decided_by,
        updated_at: view.updated_at,
    }
}

fn text(value: &serde_json::Value, key: &str) -> String {
    value[key].as_str().unwrap_or_default().to_string()
}

/// One approval as the console shows it, with what `viewer` may do to it.
pub(super) fn detail_view(detail: ApprovalDetail, viewer: Option<&Viewer>) -> ApprovalDetailView {
    let viewer = viewer.cloned().unwrap_or(Viewer {
        name: String::new(),
        role: Role::Reader,
    });
    let mut timeline = Vec::new();
    let mut can_decide = false;
    for node in &detail.nodes {
        timeline.push(TimelineEntry {
            what: format!("Step {:?}", text(node, "step_name")),
            status: text(node, "status"),
            who: None,
        });
        for item in detail
            .work_items
            .iter()
            .filter(|w| w["node_id"] == node["id"])
        {
            let (kind, approver) = (text(item, "approver_kind"), text(item, "approver"));
            let status = text(item, "status");
            if status == "pending"
                && ((kind == "user" && approver == viewer.name)
                    || (kind == "role" && approver == viewer.role.as_str()))
            {
                can_decide = true;
            }
            timeline.push(TimelineEntry {
                what: format!("Work item for {kind} {approver}"),
                status,
                who: item["decided_by"].as_str().map(str::to_string),
            });
        }
    }
    let approval = row(detail.approval);
    let can_recall = viewer.can(Permission::ApprovalsSubmit)
        && (approval.submitted_by == viewer.name || viewer.role == Role::Admin);
    ApprovalDetailView {
        approval,
        timeline,
        events: detail
            .events
            .into_iter()
            .map(|e| ApprovalEventRow {
                event_id: e.event_id,
                kind: e.kind,
                status: e.status,
                attempts: e.attempts,
                last_error: e.last_error,
            })
            .collect(),
        can_decide,
        can_recall,
    }
}

#[async_trait]
impl ApprovalsPort for ApprovalsConsole {
    async fn list(&self, viewer: Option<&Viewer>) -> Result<Vec<ApprovalRow>, ConsoleError> {
        let views = self.approvals.list(viewer).await.map_err(console_error)?;
        Ok(views.into_iter().map(row).collect())
    }

    async fn detail(
        &self,
        viewer: Option<&Viewer>,
        id: &str,
    ) -> Result<ApprovalDetailView, ConsoleError> {
        let detail = self
            .approvals
            .get(viewer, id)
            .await
            .map_err(console_error)?;
        Ok(detail_view(detail, viewer))
    }

    async fn of_run(
        &self,
        viewer: Option<&Viewer>,
        run_id: &str,
    ) -> Result<Vec<ApprovalDetailView>, ConsoleError> {
        let details = self
            .approvals
            .of_run(viewer, run_id)
            .await
            .map_err(console_error)?;
        Ok(details
            .into_iter()
            .map(|detail| detail_view(detail, viewer))
            .collect())
    }

    async fn act(
        &self,
        viewer: Option<&Viewer>,
        id: &str,
        action: &str,
        key: &str,
    ) -> Result<ApprovalRow, ConsoleError> {
        let decided = async {
            let decision = Decision::parse(action)?;
            let key = IdempotencyKey::parse(key)?;
            let answered = self
                .approvals
                .decide_once(viewer, id, decision, &key)
                .await?;
            serde_json::from_value::<ApprovalView>(answered.body)
                .map_err(|e| ServiceError::Internal(format!("a decision's stored answer: {e}")))
        };
        decided.await.map(row).map_err(console_error)
    }

    async fn shelf(&self, viewer: Option<&Viewer>) -> Result<ReplayShelfView, ConsoleError> {
        let status = match self.approvals.replay_status(viewer).await {
            Ok(status) => status,
            // No outbox, so no shelf: the page says so instead of failing.
            Err(err @ ServiceError::CapabilityUnavailable(_)) => {
                return Ok(ReplayShelfView {
                    counts: Vec::new(),
                    failed: Vec::new(),
                    rows_visible: false,
                    can_retry: false,
                    unavailable: Some(err.to_string()),
                })
            }
            Err(err) => return Err(console_error(err)),
        };
        Ok(ReplayShelfView {
            unavailable: None,
            rows_visible: status.rows_visible,
            counts: status
                .counts
                .into_iter()
                .map(|c| (c.status, c.count))
                .collect(),
            failed: status
                .failed
                .into_iter()
                .map(|f| FailedReplayRow {
                    event_id: f.event_id,
                    approval_id: f.approval_id,
                    attempts: f.attempts,
                    cycle: f.cycle,
                    last_error: f.last_error,
                    failed_at: f.failed_at,
                })
                .collect(),
            can_retry: viewer.is_some_and(|v| v.can(Permission::RunsWrite)),
        })
    }

    async fn retry_replay(
        &self,
        viewer: Option<&Viewer>,
        event_id: &str,
        expected_cycle: i64,
    ) -> Result<(), ConsoleError> {
        self.deliveries
            .retry(
                viewer,
                event_id,
                RetryRequest {
                    kind: kinds::FIELD_UPDATE.to_string(),
                    expected_status: DeliveryStatus::Failed,
                    expected_cycle: Some(expected_cycle),
                    allow_uncertain: false,
                },
            )
            .await
            .map(|_| ())
            .map_err(console_error)
    }
}
