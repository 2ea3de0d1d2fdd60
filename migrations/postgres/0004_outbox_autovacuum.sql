-- A queue table changes status constantly: every change leaves a dead index entry
-- that claims must step over until VACUUM removes it. Vacuum and analyze it after
-- 2 % of its rows changed instead of the default 20 %.
ALTER TABLE outbox_events SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02
);
