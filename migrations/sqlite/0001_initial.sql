-- Herald's first schema: console users, API tokens, sessions and runs.
-- Times are epoch milliseconds from the store's own clock.
CREATE TABLE users (
    id TEXT PRIMARY KEY NOT NULL,
    username TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('reader', 'operator', 'admin')),
    created_at INTEGER NOT NULL
);

CREATE TABLE api_tokens (
    id TEXT PRIMARY KEY NOT NULL,
    name TEXT NOT NULL,
    secret_hash TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL CHECK (role IN ('reader', 'operator', 'admin')),
    created_at INTEGER NOT NULL
);

CREATE TABLE sessions (
    id TEXT PRIMARY KEY NOT NULL,
    data TEXT NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX sessions_expires_at ON sessions (expires_at);

CREATE TABLE runs (
    id TEXT PRIMARY KEY NOT NULL,
    run_type TEXT NOT NULL,
    tenant TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'awaiting_approval', 'succeeded', 'failed', 'cancelled')),
    callback_url TEXT,
    result TEXT,
    transition_seq INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX runs_type_id ON runs (run_type, id);
CREATE INDEX runs_status_id ON runs (status, id);
