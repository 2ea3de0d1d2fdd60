-- Find by id with a part of an id (issue 23, item 2), without reading a table
-- through. The console shows an id's last characters, so an operator pastes an
-- end as often as a beginning: an index on each id's last 8 characters answers
-- an end by lookup, and one on the id in byte order (`COLLATE "C"`) a beginning
-- as a range (`Engine::id_part_condition` says the same expressions). The
-- primary key's own index cannot serve a beginning: under a database's
-- linguistic collation its order is not byte order. (Not the first 8
-- characters: time-ordered ids share them for a minute at a time.) An event id
-- ends with its route or transition, so only its beginning is searched.
CREATE INDEX runs_id_bytes ON runs (id COLLATE "C");
CREATE INDEX runs_id_tail ON runs (right(id, 8));
CREATE INDEX outbox_events_id_bytes ON outbox_events (event_id COLLATE "C");
CREATE INDEX approval_instances_id_bytes ON approval_instances (id COLLATE "C");
CREATE INDEX approval_instances_id_tail ON approval_instances (right(id, 8));
CREATE INDEX records_id_bytes ON records (id COLLATE "C");
CREATE INDEX records_id_tail ON records (right(id, 8));
