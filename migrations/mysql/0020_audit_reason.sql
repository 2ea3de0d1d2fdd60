-- Why an operator did what the audit row records, in their words (issue 22: a
-- skipped lane head carries its reason). NULL for actions that take none.
ALTER TABLE outbox_audit ADD COLUMN reason TEXT NULL;
