-- Every failure keeps its own dead letter (issue 19): an event failed, retried by
-- an operator and failed again has one row per failed cycle, so the second
-- failure's reason no longer overwrites the first's. SQLite cannot drop a UNIQUE
-- constraint, so the table is rebuilt. An existing row is the failure of its
-- event's current cycle while the event is still failed, else (an operator has
-- retried it since) of the cycle before.
CREATE TABLE outbox_dead_letters_per_cycle (
    id TEXT PRIMARY KEY NOT NULL,
    event_id TEXT NOT NULL,
    cycle INTEGER NOT NULL,
    kind TEXT NOT NULL,
    reason TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (event_id, cycle)
);
INSERT INTO outbox_dead_letters_per_cycle (id, event_id, cycle, kind, reason, created_at)
SELECT d.id, d.event_id,
       COALESCE((SELECT CASE WHEN e.status = 'failed' THEN e.cycle ELSE MAX(e.cycle - 1, 1) END
                 FROM outbox_events e WHERE e.event_id = d.event_id), 1),
       d.kind, d.reason, d.created_at
FROM outbox_dead_letters d;
DROP TABLE outbox_dead_letters;
ALTER TABLE outbox_dead_letters_per_cycle RENAME TO outbox_dead_letters;
