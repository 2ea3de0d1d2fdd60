-- What the operator console's queries need at scale (1M runs, 3M events):
-- the run types known to the store, kept as runs are created, so the type filter
-- never scans every run; delivery counts per run from an index holding the parent
-- and the status; tenant and creation-time filters; the outbox listing in
-- creation order.
CREATE TABLE run_types (
    run_type VARCHAR(64) NOT NULL PRIMARY KEY
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
INSERT INTO run_types (run_type) SELECT DISTINCT run_type FROM runs;

CREATE INDEX outbox_parent_status ON outbox_events (parent_type, parent_id, status);
DROP INDEX outbox_parent ON outbox_events;
CREATE INDEX outbox_created ON outbox_events (created_at, event_id);
CREATE INDEX runs_tenant_id ON runs (tenant, id);
CREATE INDEX runs_created_at ON runs (created_at);

-- A bulk retry writes one audit row for every delivery it retried.
ALTER TABLE outbox_audit ADD COLUMN affected INT NOT NULL DEFAULT 1;
