//! Ordered lanes for operators (issue 22, docs/ORDERING.md §6): the blocked lanes
//! of every store, and the skip that lets a lane go on past its head.

use app::dto::{BlockedLaneView, BlockedLanes, DeliveryView, SkipCommand, MAX_SKIP_REASON};
use vocab::{Permission, Viewer};

use super::{refusal_error, view, DeliveryService};
use crate::service::{require, ServiceError};
use crate::store::ports::ManualSkip;

/// The most blocked lanes one answer lists.
pub const BLOCKED_LANES_SHOWN: u32 = 50;

impl DeliveryService {
    /// The lanes whose head waits for an operator, longest blocked first, from
    /// every store (a store that cannot be read is named, the rest still listed).
    pub async fn blocked_lanes(
        &self,
        viewer: Option<&Viewer>,
    ) -> Result<BlockedLanes, ServiceError> {
        let viewer = require(viewer, Permission::RunsRead)?;
        self.require_durable()?;
        let sees_data = viewer.can(Permission::DataRead);
        let can_act = viewer.can(Permission::RunsWrite);
        let mut answer = BlockedLanes::default();
        let mut heads = Vec::new();
        for part in &self.parts {
            // One over the page: more than fit shows as `more`.
            let read = part.reads.blocked_lanes(BLOCKED_LANES_SHOWN + 1).await;
            if let Some((lanes, open)) = self.partial(part, read, &mut answer.unavailable)? {
                heads.extend(lanes);
                answer.open_lanes += open;
            }
        }
        heads.sort_by(|a, b| {
            (a.head.updated_at, &a.head.event_id).cmp(&(b.head.updated_at, &b.head.event_id))
        });
        answer.more = heads.len() > BLOCKED_LANES_SHOWN as usize;
        answer.lanes = heads
            .into_iter()
            .take(BLOCKED_LANES_SHOWN as usize)
            .map(|lane| BlockedLaneView {
                lane: lane.lane,
                head: view(&lane.head, sees_data),
                waiting: lane.waiting,
                can_act,
            })
            .collect();
        Ok(answer)
    }

    /// Skips a failed or uncertain delivery for good, from the state (and cycle)
    /// the operator saw, with their reason: its lane goes on, and the audit row
    /// commits with the skip. Needs `runs:write`; an uncertain one the
    /// acknowledgement that it may never have arrived.
    pub async fn skip(
        &self,
        viewer: Option<&Viewer>,
        event_id: &str,
        command: SkipCommand,
    ) -> Result<DeliveryView, ServiceError> {
        let viewer = require(viewer, Permission::RunsWrite)?;
        self.require_durable()?;
        let reason = command.reason.trim();
        if reason.is_empty() {
            return Err(ServiceError::invalid(
                "reason",
                "say why the delivery is skipped: the reason is kept in the audit trail",
            ));
        }
        if reason.chars().count() > MAX_SKIP_REASON {
            return Err(ServiceError::invalid(
                "reason",
                format!("at most {MAX_SKIP_REASON} characters"),
            ));
        }
        let (store, _) = self.owner(&command.kind);
        let outcome = store
            .skip_event(&ManualSkip {
                event_id: event_id.to_string(),
                kind: command.kind,
                expected_status: command.expected_status,
                expected_cycle: command.expected_cycle,
                allow_uncertain: command.allow_uncertain,
                actor: viewer.name.clone(),
                reason: reason.to_string(),
            })
            .await?;
        outcome.map_err(refusal_error)?;
        tracing::info!(event_id, by = %viewer.name, "delivery skipped");
        let event = store
            .get_event(event_id)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("delivery {event_id:?}")))?;
        Ok(view(&event, viewer.can(Permission::DataRead)))
    }
}
