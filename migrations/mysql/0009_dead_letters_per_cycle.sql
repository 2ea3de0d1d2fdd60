-- Every failure keeps its own dead letter (issue 19): an event failed, retried by
-- an operator and failed again has one row per failed cycle, so the second
-- failure's reason no longer overwrites the first's. An existing row is the
-- failure of its event's current cycle while the event is still failed, else (an
-- operator has retried it since) of the cycle before.
ALTER TABLE outbox_dead_letters ADD COLUMN cycle INT NOT NULL DEFAULT 1;
UPDATE outbox_dead_letters d JOIN outbox_events e ON e.event_id = d.event_id
SET d.cycle = CASE WHEN e.status = 'failed' THEN e.cycle ELSE GREATEST(e.cycle - 1, 1) END;
ALTER TABLE outbox_dead_letters DROP INDEX event_id, ADD UNIQUE KEY outbox_dead_letters_event_cycle (event_id, cycle);
