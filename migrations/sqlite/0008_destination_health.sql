-- Per-destination health (issue 10). Each event names its destination's origin
-- (scheme://host:port, from its frozen payload) so a claim can leave out the
-- destinations that are at their in-flight cap or whose breaker is open, and an
-- opening breaker can push that destination's pending events to its probe time
-- in one statement. Older rows keep NULL and are gated after their claim.
ALTER TABLE outbox_events ADD COLUMN destination TEXT NULL;
CREATE INDEX outbox_destination ON outbox_events (destination, status, next_attempt_at);

-- Circuit breakers, shared by every node: consecutive failures are counted in
-- each node's memory; state changes (open, half_open, closed) are written here,
-- so every node and the console see them. route is the configured route name
-- (or "callback"), the only label metrics show.
CREATE TABLE destination_breakers (
    destination TEXT NOT NULL PRIMARY KEY,
    route TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('open', 'half_open', 'closed')),
    failures INTEGER NOT NULL,
    open_ms INTEGER NOT NULL,
    opened_at INTEGER,
    probe_at INTEGER,
    updated_at INTEGER NOT NULL
);
