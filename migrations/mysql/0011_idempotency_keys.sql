-- Idempotency keys (issue 21): a create's key, who sent it, a hash of its request
-- and the answer it got, written in the create's own transaction, so an effect
-- never exists without its key and a repeat gets the original answer.
CREATE TABLE idempotency_keys (
    principal VARCHAR(191) NOT NULL,
    idem_key VARCHAR(191) NOT NULL,
    operation VARCHAR(64) NOT NULL,
    request_hash VARCHAR(64) NOT NULL,
    claim VARCHAR(64) NOT NULL,
    status INT,
    body MEDIUMTEXT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (principal, idem_key),
    INDEX idempotency_keys_created (created_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
