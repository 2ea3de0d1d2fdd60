-- Find by id with a part of an id (issue 23, item 2), without reading a table
-- through. The console shows an id's last characters, so an operator pastes an
-- end as often as a beginning: an index on each id's first and last 8
-- characters answers either by lookup (`Engine::id_part_condition` says the same
-- expressions). The primary key's own index cannot serve a beginning here: under
-- a database's linguistic collation its order is not byte order.
CREATE INDEX runs_id_head ON runs (left(id, 8));
CREATE INDEX runs_id_tail ON runs (right(id, 8));
CREATE INDEX outbox_events_id_head ON outbox_events (left(event_id, 8));
CREATE INDEX outbox_events_id_tail ON outbox_events (right(event_id, 8));
CREATE INDEX approval_instances_id_head ON approval_instances (left(id, 8));
CREATE INDEX approval_instances_id_tail ON approval_instances (right(id, 8));
CREATE INDEX records_id_head ON records (left(id, 8));
CREATE INDEX records_id_tail ON records (right(id, 8));
