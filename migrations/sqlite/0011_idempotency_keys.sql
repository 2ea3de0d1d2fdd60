-- Idempotency keys (issue 21): a create's key, who sent it, a hash of its request
-- and the answer it got, written in the create's own transaction, so an effect
-- never exists without its key and a repeat gets the original answer.
CREATE TABLE idempotency_keys (
    principal TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    operation TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    claim TEXT NOT NULL,
    status INTEGER,
    body TEXT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (principal, idem_key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
