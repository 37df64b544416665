-- The catalog and what the leader knows of the cluster: models, nodes and
-- the replicas placed on them (docs/models.md). The leader writes them; every
-- control plane reads them, so `llmgw ctl models` answers on a standby too.

-- A model as it was added (`llmgw ctl model add -f FILE`), its spec whole as
-- JSON: the catalog's validation is in llmgw, not in SQL, and a new key in a
-- model file needs no migration. `version` is raised by every change, so of
-- two administrators changing one model at once the second is told to look
-- again. `stopped` mirrors the spec's, for listing. A removed model keeps its
-- row (removed_at set) until its replicas have stopped; `purge` says its
-- weights go from the nodes then too. `restarts` is raised by a restart:
-- every replica started before it is replaced, one by one.
CREATE TABLE models (
    name       TEXT PRIMARY KEY,
    spec       TEXT NOT NULL,
    version    INTEGER NOT NULL,
    stopped    BOOLEAN NOT NULL DEFAULT FALSE,
    restarts   INTEGER NOT NULL DEFAULT 0,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    updated_by TEXT NOT NULL DEFAULT '',
    removed_at DOUBLE PRECISION,
    purge      BOOLEAN NOT NULL DEFAULT FALSE
);

-- A node as it last registered, and its last heartbeat. The heartbeat is
-- written far more often than the rest, so it has columns of its own.
CREATE TABLE nodes (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    labels       TEXT NOT NULL DEFAULT '{}',
    register     TEXT NOT NULL,
    heartbeat    TEXT,
    heartbeat_at DOUBLE PRECISION,
    state        TEXT NOT NULL DEFAULT '',
    first_seen   DOUBLE PRECISION NOT NULL,
    updated_at   DOUBLE PRECISION NOT NULL
);
CREATE INDEX nodes_name ON nodes (name);

-- One row per shard the leader placed: the agent knows it by `id` (StartShard's
-- shard_id). What it holds (cores, memory, cards) is what it was started
-- with, so a model changed since still counts the old figures until the old
-- replica is gone. No foreign keys: a replica outlives a model removed or a
-- node forgotten, until it is stopped.
CREATE TABLE replicas (
    id            TEXT PRIMARY KEY,
    model         TEXT NOT NULL,
    node_id       TEXT NOT NULL,
    profile       INTEGER NOT NULL DEFAULT 0,
    state         TEXT NOT NULL,
    desired       TEXT NOT NULL DEFAULT 'run',
    url           TEXT NOT NULL DEFAULT '',
    since         DOUBLE PRECISION NOT NULL,
    message       TEXT NOT NULL DEFAULT '',
    created_at    DOUBLE PRECISION NOT NULL,
    profile_hash  TEXT NOT NULL DEFAULT '',
    cpu_cores     INTEGER NOT NULL DEFAULT 0,
    memory_mb     INTEGER NOT NULL DEFAULT 0,
    gpus          TEXT NOT NULL DEFAULT '[]',
    gpu_memory_mb INTEGER NOT NULL DEFAULT 0,
    replaces      TEXT,
    detail        TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX replicas_model ON replicas (model);
CREATE INDEX replicas_node ON replicas (node_id);
