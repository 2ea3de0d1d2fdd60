-- The approvals source: records (business data FieldUpdates mutate), versioned
-- process definitions, and approval instances with their nodes and work items.
-- Times are epoch milliseconds from the store's clock.
CREATE TABLE records (
    id VARCHAR(64) NOT NULL PRIMARY KEY,
    object VARCHAR(64) NOT NULL,
    fields MEDIUMTEXT NOT NULL,
    version BIGINT NOT NULL CHECK (version >= 1),
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
CREATE INDEX records_object ON records (object, id);

CREATE TABLE approval_definitions (
    id VARCHAR(128) NOT NULL,
    version BIGINT NOT NULL CHECK (version >= 1),
    object VARCHAR(64) NOT NULL,
    body MEDIUMTEXT NOT NULL,
    created_by VARCHAR(255) NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (id, version)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE approval_instances (
    id VARCHAR(64) NOT NULL PRIMARY KEY,
    definition_id VARCHAR(128) NOT NULL,
    definition_version BIGINT NOT NULL,
    object VARCHAR(64) NOT NULL,
    record_id VARCHAR(64) NOT NULL,
    status VARCHAR(16) NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'removed')),
    step_index BIGINT NOT NULL,
    submitted_by VARCHAR(255) NOT NULL,
    decided_by VARCHAR(255),
    transition_seq BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
CREATE INDEX approval_instances_record ON approval_instances (object, record_id);

CREATE TABLE approval_nodes (
    id VARCHAR(64) NOT NULL PRIMARY KEY,
    instance_id VARCHAR(64) NOT NULL,
    step_index BIGINT NOT NULL,
    step_name VARCHAR(255) NOT NULL,
    status VARCHAR(16) NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'removed')),
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
CREATE INDEX approval_nodes_instance ON approval_nodes (instance_id);

CREATE TABLE approval_work_items (
    id VARCHAR(64) NOT NULL PRIMARY KEY,
    instance_id VARCHAR(64) NOT NULL,
    node_id VARCHAR(64) NOT NULL,
    approver_kind VARCHAR(8) NOT NULL CHECK (approver_kind IN ('user', 'role')),
    approver VARCHAR(255) NOT NULL,
    status VARCHAR(16) NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'removed')),
    decided_by VARCHAR(255),
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
CREATE INDEX approval_work_items_instance ON approval_work_items (instance_id);
