-- Herald's first schema: console users, API tokens, sessions and runs.
-- Times are epoch milliseconds from the store's own clock.
CREATE TABLE users (
    id VARCHAR(64) NOT NULL PRIMARY KEY,
    username VARCHAR(255) NOT NULL UNIQUE,
    password_hash VARCHAR(255) NOT NULL,
    role VARCHAR(16) NOT NULL CHECK (role IN ('reader', 'operator', 'admin')),
    created_at BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE api_tokens (
    id VARCHAR(64) NOT NULL PRIMARY KEY,
    name VARCHAR(255) NOT NULL,
    secret_hash VARCHAR(128) NOT NULL UNIQUE,
    role VARCHAR(16) NOT NULL CHECK (role IN ('reader', 'operator', 'admin')),
    created_at BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE sessions (
    id VARCHAR(64) NOT NULL PRIMARY KEY,
    data MEDIUMTEXT NOT NULL,
    expires_at BIGINT NOT NULL,
    INDEX sessions_expires_at (expires_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE runs (
    id VARCHAR(64) NOT NULL PRIMARY KEY,
    run_type VARCHAR(64) NOT NULL,
    tenant VARCHAR(128) NOT NULL,
    status VARCHAR(32) NOT NULL CHECK (status IN ('queued', 'running', 'awaiting_approval', 'succeeded', 'failed', 'cancelled')),
    callback_url VARCHAR(2048),
    result MEDIUMTEXT,
    transition_seq BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    INDEX runs_type_id (run_type, id),
    INDEX runs_status_id (status, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
