-- Retention (issue 21): one node at a time runs a retention pass, holding this
-- lease row (advisory locks are not shared across Galera nodes); the audit trail
-- is removed by age, oldest first.
CREATE TABLE maintenance_leases (
    name VARCHAR(64) NOT NULL PRIMARY KEY,
    holder VARCHAR(191) NOT NULL,
    expires_at BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
CREATE INDEX outbox_audit_at ON outbox_audit (at);
-- An Idempotency-Key may be 255 characters (visible ASCII), as on the other engines;
-- 0011 held 191. ASCII keeps the primary key within InnoDB's index limit.
ALTER TABLE idempotency_keys MODIFY idem_key VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL;
