-- The overview's figures (issue 23, item 1): per-minute rollups of settled
-- deliveries, written by one node's maintenance from the rows settled in each
-- minute, so the overview never scans the outbox.
-- The rows settled in a time range, found without reading the rest (MariaDB has
-- no partial index: the state leads, so a range per settled state is read).
CREATE INDEX outbox_settled ON outbox_events (status, updated_at);

-- One row per minute, source, kind and state (and, for failed and uncertain
-- deliveries, destination origin; '' otherwise). State 'pending' rows are the
-- backlog as last sampled in that minute (pending or in flight, and the oldest's
-- commit time). `latency` holds, for completed rows, how many took commit to
-- delivery within each bound of `store::rollups::LATENCY_BOUNDS_MS`
-- (comma-separated counts, one more than the bounds).
CREATE TABLE delivery_minutes (
    minute BIGINT NOT NULL,
    source VARCHAR(16) NOT NULL,
    kind VARCHAR(32) NOT NULL,
    status VARCHAR(16) NOT NULL,
    destination VARCHAR(191) NOT NULL,
    deliveries BIGINT NOT NULL,
    latency TEXT NULL,
    oldest_at BIGINT NULL,
    PRIMARY KEY (minute, source, kind, status, destination)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Minutes before this one are final: settled rows are no longer counted into
-- them. One row.
CREATE TABLE delivery_rollup_state (
    id BIGINT NOT NULL PRIMARY KEY,
    final_before BIGINT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
INSERT INTO delivery_rollup_state (id, final_before) VALUES (1, NULL);
