-- Find by id with a part of an id (issue 23, item 2), without reading a table
-- through. The console shows an id's last characters, so an operator pastes an
-- end as often as a beginning: an index on each id's last 8 characters answers
-- an end by lookup (`Engine::id_part_condition` says the same expression). A
-- beginning is a range of the primary key's own index (byte order here). Not
-- on outbox_events: an event id ends with its route or transition, so only its
-- beginning is searched, and the hottest table keeps its writes.
CREATE INDEX runs_id_tail ON runs (substr(id, -8));
CREATE INDEX approval_instances_id_tail ON approval_instances (substr(id, -8));
CREATE INDEX records_id_tail ON records (substr(id, -8));
