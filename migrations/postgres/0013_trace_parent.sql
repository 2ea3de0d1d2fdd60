-- OpenTelemetry (issue 24): the W3C traceparent of the request that owed an
-- event, so its delivery continues that trace (null with traces off).
ALTER TABLE outbox_events ADD COLUMN trace_parent TEXT NULL;
