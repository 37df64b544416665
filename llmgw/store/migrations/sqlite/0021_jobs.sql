-- Workflow jobs: a ComfyUI workflow run by POST /v1/workflows/runs, which
-- outlives the request that asked for it, carried on by the leader's runner
-- (open ones, oldest first) and polled by the client, as a batch is.
-- inputs, progress, outputs, error and metadata are JSON text, as batches'
-- are; an output is a file in `files`, named here by its id. An ended job
-- is deleted with its output files after router.jobs.retain_days.
CREATE TABLE jobs (
    id         TEXT PRIMARY KEY,
    project_id TEXT NOT NULL,
    key_id     TEXT,
    person_id  TEXT,
    model      TEXT NOT NULL,
    status     TEXT NOT NULL,
    inputs     TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL,
    request_id TEXT NOT NULL DEFAULT '',
    started_at REAL,
    ended_at   REAL,
    progress   TEXT NOT NULL DEFAULT '{}',
    outputs    TEXT NOT NULL DEFAULT '[]',
    error      TEXT,
    replica    TEXT NOT NULL DEFAULT '',
    metadata   TEXT NOT NULL DEFAULT '{}'
);
-- A project's list, newest first; the runner's open jobs and retention's
-- ended ones, oldest first.
CREATE INDEX jobs_project ON jobs (project_id, created_at);
CREATE INDEX jobs_status ON jobs (status, created_at);
