-- The durable outbox: one row per owed side effect (event), its attempt log, its
-- dead letters and the operators' audit trail. Times are epoch milliseconds from
-- the store's clock.
CREATE TABLE outbox_events (
    event_id TEXT PRIMARY KEY NOT NULL,
    source TEXT NOT NULL CHECK (source IN ('jobs', 'approvals')),
    kind TEXT NOT NULL,
    parent_type TEXT NOT NULL,
    parent_id TEXT NOT NULL,
    payload TEXT NOT NULL,
    redeliverable BIGINT NOT NULL CHECK (redeliverable IN (0, 1)),
    status TEXT NOT NULL CHECK (status IN ('pending', 'processing', 'completed', 'skipped', 'failed', 'uncertain')),
    attempts BIGINT NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    cycle BIGINT NOT NULL DEFAULT 1 CHECK (cycle >= 1),
    cycle_attempts BIGINT NOT NULL DEFAULT 0 CHECK (cycle_attempts >= 0),
    max_attempts BIGINT NOT NULL CHECK (max_attempts >= 1),
    next_attempt_at BIGINT NOT NULL,
    lease_token TEXT,
    lease_holder TEXT,
    lease_expires_at BIGINT,
    last_error TEXT,
    last_status_code BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    completed_at BIGINT,
    failed_at BIGINT,
    alerted_at BIGINT,
    uncertain_at BIGINT,
    dead_letter_id TEXT,
    -- A processing row always holds a lease.
    CHECK (status <> 'processing' OR (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL))
);
CREATE INDEX outbox_due ON outbox_events (status, next_attempt_at);
CREATE INDEX outbox_leases ON outbox_events (status, lease_expires_at);
CREATE INDEX outbox_parent ON outbox_events (parent_type, parent_id);
CREATE INDEX outbox_kind_status ON outbox_events (kind, status, created_at);

CREATE TABLE outbox_attempts (
    event_id TEXT NOT NULL,
    attempt BIGINT NOT NULL,
    cycle BIGINT NOT NULL,
    started_at BIGINT NOT NULL,
    finished_at BIGINT NOT NULL,
    outcome TEXT NOT NULL,
    status_code BIGINT,
    error TEXT,
    worker TEXT NOT NULL,
    PRIMARY KEY (event_id, attempt)
);

CREATE TABLE outbox_dead_letters (
    id TEXT PRIMARY KEY NOT NULL,
    event_id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    reason TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE outbox_audit (
    id TEXT PRIMARY KEY NOT NULL,
    event_id TEXT NOT NULL,
    action TEXT NOT NULL,
    actor TEXT NOT NULL,
    from_status TEXT NOT NULL,
    acknowledged_duplicate_risk BIGINT NOT NULL,
    at BIGINT NOT NULL
);
CREATE INDEX outbox_audit_event ON outbox_audit (event_id, at);
