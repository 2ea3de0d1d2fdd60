-- The durable outbox: one row per owed side effect (event), its attempt log, its
-- dead letters and the operators' audit trail. Times are epoch milliseconds from
-- the store's clock.
CREATE TABLE outbox_events (
    event_id VARCHAR(191) NOT NULL PRIMARY KEY,
    source VARCHAR(16) NOT NULL CHECK (source IN ('jobs', 'approvals')),
    kind VARCHAR(32) NOT NULL,
    parent_type VARCHAR(32) NOT NULL,
    parent_id VARCHAR(191) NOT NULL,
    payload MEDIUMTEXT NOT NULL,
    redeliverable INT NOT NULL CHECK (redeliverable IN (0, 1)),
    status VARCHAR(16) NOT NULL CHECK (status IN ('pending', 'processing', 'completed', 'skipped', 'failed', 'uncertain')),
    attempts INT NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    cycle INT NOT NULL DEFAULT 1 CHECK (cycle >= 1),
    cycle_attempts INT NOT NULL DEFAULT 0 CHECK (cycle_attempts >= 0),
    max_attempts INT NOT NULL CHECK (max_attempts >= 1),
    next_attempt_at BIGINT NOT NULL,
    lease_token VARCHAR(64),
    lease_holder VARCHAR(128),
    lease_expires_at BIGINT,
    last_error VARCHAR(1024),
    last_status_code INT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    completed_at BIGINT,
    failed_at BIGINT,
    alerted_at BIGINT,
    uncertain_at BIGINT,
    dead_letter_id VARCHAR(191),
    CHECK (status <> 'processing' OR (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL)),
    INDEX outbox_due (status, next_attempt_at),
    INDEX outbox_leases (status, lease_expires_at),
    INDEX outbox_parent (parent_type, parent_id),
    INDEX outbox_kind_status (kind, status, created_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE outbox_attempts (
    event_id VARCHAR(191) NOT NULL,
    attempt INT NOT NULL,
    cycle INT NOT NULL,
    started_at BIGINT NOT NULL,
    finished_at BIGINT NOT NULL,
    outcome VARCHAR(16) NOT NULL,
    status_code INT,
    error VARCHAR(1024),
    worker VARCHAR(128) NOT NULL,
    PRIMARY KEY (event_id, attempt)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE outbox_dead_letters (
    id VARCHAR(191) NOT NULL PRIMARY KEY,
    event_id VARCHAR(191) NOT NULL UNIQUE,
    kind VARCHAR(32) NOT NULL,
    reason VARCHAR(1024) NOT NULL,
    created_at BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE outbox_audit (
    id VARCHAR(64) NOT NULL PRIMARY KEY,
    event_id VARCHAR(191) NOT NULL,
    action VARCHAR(32) NOT NULL,
    actor VARCHAR(255) NOT NULL,
    from_status VARCHAR(16) NOT NULL,
    acknowledged_duplicate_risk INT NOT NULL,
    at BIGINT NOT NULL,
    INDEX outbox_audit_event (event_id, at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
