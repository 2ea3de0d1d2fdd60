-- The approvals source: records (business data FieldUpdates mutate), versioned
-- process definitions, and approval instances with their nodes and work items.
-- Times are epoch milliseconds from the store's clock.
CREATE TABLE records (
    id TEXT PRIMARY KEY NOT NULL,
    object TEXT NOT NULL,
    fields TEXT NOT NULL,
    version BIGINT NOT NULL CHECK (version >= 1),
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX records_object ON records (object, id);

CREATE TABLE approval_definitions (
    id TEXT NOT NULL,
    version BIGINT NOT NULL CHECK (version >= 1),
    object TEXT NOT NULL,
    body TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (id, version)
);

CREATE TABLE approval_instances (
    id TEXT PRIMARY KEY NOT NULL,
    definition_id TEXT NOT NULL,
    definition_version BIGINT NOT NULL,
    object TEXT NOT NULL,
    record_id TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'removed')),
    step_index BIGINT NOT NULL,
    submitted_by TEXT NOT NULL,
    decided_by TEXT,
    transition_seq BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX approval_instances_record ON approval_instances (object, record_id);

CREATE TABLE approval_nodes (
    id TEXT PRIMARY KEY NOT NULL,
    instance_id TEXT NOT NULL,
    step_index BIGINT NOT NULL,
    step_name TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'removed')),
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX approval_nodes_instance ON approval_nodes (instance_id);

CREATE TABLE approval_work_items (
    id TEXT PRIMARY KEY NOT NULL,
    instance_id TEXT NOT NULL,
    node_id TEXT NOT NULL,
    approver_kind TEXT NOT NULL CHECK (approver_kind IN ('user', 'role')),
    approver TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'removed')),
    decided_by TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX approval_work_items_instance ON approval_work_items (instance_id);
