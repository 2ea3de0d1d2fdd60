-- Every failure keeps its own dead letter (issue 19): an event failed, retried by
-- an operator and failed again has one row per failed cycle, so the second
-- failure's reason no longer overwrites the first's. Existing rows take their
-- event's cycle.
ALTER TABLE outbox_dead_letters ADD COLUMN cycle INT NOT NULL DEFAULT 1;
UPDATE outbox_dead_letters d JOIN outbox_events e ON e.event_id = d.event_id SET d.cycle = e.cycle;
ALTER TABLE outbox_dead_letters DROP INDEX event_id, ADD UNIQUE KEY outbox_dead_letters_event_cycle (event_id, cycle);
