-- Retention (issue 21): one node at a time runs a retention pass, holding this
-- lease row (portable: advisory locks are not shared across Galera nodes); the
-- audit trail is removed by age, oldest first.
CREATE TABLE maintenance_leases (
    name TEXT PRIMARY KEY NOT NULL,
    holder TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX outbox_audit_at ON outbox_audit (at);
