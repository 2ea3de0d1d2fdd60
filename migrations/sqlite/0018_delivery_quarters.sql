-- The overview's day (issue 23, item 1) from quarter-hour rollups: each row sums
-- the per-minute rows (`delivery_minutes`) of one quarter hour, so a day's chart
-- reads 96 quarters instead of 1,440 minutes. Same shape as `delivery_minutes`;
-- `minute` is the quarter's first minute. A 'pending' row holds the backlog's
-- peak in the quarter (per source and kind) and the oldest commit time seen.
CREATE TABLE delivery_quarters (
    minute BIGINT NOT NULL,
    source TEXT NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    destination TEXT NOT NULL,
    deliveries BIGINT NOT NULL,
    latency TEXT NULL,
    oldest_at BIGINT NULL,
    PRIMARY KEY (minute, source, kind, status, destination)
);

-- Quarters before this one are final (summed from final minutes). NULL: none
-- summed yet, so the first pass sums every minute kept.
ALTER TABLE delivery_rollup_state ADD COLUMN quarters_before BIGINT NULL;
