-- Ordered lanes (issue 22, docs/ORDERING.md): events with one lane key are
-- delivered one at a time, in the order the transactions that enqueued them
-- committed. `outbox_events.lane` names an event's lane (NULL: unordered, as
-- every event was before).
ALTER TABLE outbox_events ADD COLUMN lane TEXT NULL;

-- A lane's next sequence number, taken and bumped inside the enqueuing
-- transaction: the row's lock makes sequence order commit order.
CREATE TABLE lane_sequences (
    lane VARCHAR(191) NOT NULL PRIMARY KEY,
    next_seq BIGINT NOT NULL
);

-- The open members of each lane: an event is one until it is completed or
-- skipped (its row is deleted in that transaction). A claim takes a laned event
-- only when no member of its lane has a lower sequence number.
CREATE TABLE lane_members (
    lane VARCHAR(191) NOT NULL,
    seq BIGINT NOT NULL,
    event_id VARCHAR(191) NOT NULL,
    PRIMARY KEY (lane, seq)
);
CREATE UNIQUE INDEX lane_members_event ON lane_members (event_id);
