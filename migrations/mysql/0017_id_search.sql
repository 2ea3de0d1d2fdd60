-- Find by id with a part of an id (issue 23, item 2), without reading a table
-- through. The console shows an id's last characters, so an operator pastes an
-- end as often as a beginning: each id's last 8 characters, as a virtual column
-- (MariaDB indexes no expression) with an index, answer an end by lookup
-- (`Engine::id_part_condition` names the columns). A beginning is a range of
-- the primary key's own index (utf8mb4_bin: byte order). Not on outbox_events:
-- an event id ends with its route or transition, so only its beginning is
-- searched, and the hottest table keeps its writes.
ALTER TABLE runs
    ADD COLUMN id_tail VARCHAR(8) AS (RIGHT(id, 8)) VIRTUAL,
    ADD INDEX runs_id_tail (id_tail);
ALTER TABLE approval_instances
    ADD COLUMN id_tail VARCHAR(8) AS (RIGHT(id, 8)) VIRTUAL,
    ADD INDEX approval_instances_id_tail (id_tail);
ALTER TABLE records
    ADD COLUMN id_tail VARCHAR(8) AS (RIGHT(id, 8)) VIRTUAL,
    ADD INDEX records_id_tail (id_tail);
