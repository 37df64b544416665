-- Files and batches in OpenAI's shapes (issue 16, docs/batches.md).

-- A usage row sent by the batch runner names its batch: `llmgw ctl usage
-- --batch` sums those only, and the row's cost is the batch's discounted one.
ALTER TABLE usage ADD COLUMN batch_id TEXT;

-- An uploaded file (file-…) and the files a batch writes. Its bytes are in
-- `content` when small (place 'store'), or on the leader's data directory
-- under files/, named by the id alone (place 'disk'): never a name a user gave.
CREATE TABLE files (
    id         TEXT PRIMARY KEY,
    project_id TEXT NOT NULL,
    key_id     TEXT,
    purpose    TEXT NOT NULL,
    filename   TEXT NOT NULL,
    bytes      INTEGER NOT NULL,
    created_at REAL NOT NULL,
    place      TEXT NOT NULL,
    content    BLOB
);
CREATE INDEX files_project ON files (project_id, created_at);

-- A batch (batch_…): what it runs, how far it got, and when each step came.
CREATE TABLE batches (
    id                TEXT PRIMARY KEY,
    project_id        TEXT NOT NULL,
    key_id            TEXT NOT NULL,
    endpoint          TEXT NOT NULL,
    input_file_id     TEXT NOT NULL,
    completion_window TEXT NOT NULL,
    status            TEXT NOT NULL,
    total             INTEGER NOT NULL,
    completed         INTEGER NOT NULL DEFAULT 0,
    failed            INTEGER NOT NULL DEFAULT 0,
    output_file_id    TEXT,
    error_file_id     TEXT,
    created_at        REAL NOT NULL,
    in_progress_at    REAL,
    finalizing_at     REAL,
    completed_at      REAL,
    cancelling_at     REAL,
    cancelled_at      REAL,
    failed_at         REAL,
    expired_at        REAL,
    expires_at        REAL NOT NULL,
    metadata          TEXT NOT NULL DEFAULT '{}',
    errors            TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX batches_project ON batches (project_id, created_at);
CREATE INDEX batches_status ON batches (status);

-- Each line of a batch's input: pending until its answer (or refusal) is
-- recorded, in the same transaction as its usage row, so a line runs at most
-- once and a new leader sends only the lines still pending.
CREATE TABLE batch_lines (
    batch_id  TEXT NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
    line      INTEGER NOT NULL,
    custom_id TEXT NOT NULL,
    state     TEXT NOT NULL DEFAULT 'pending',
    result    TEXT,
    PRIMARY KEY (batch_id, line)
);
CREATE UNIQUE INDEX batch_lines_custom_id ON batch_lines (batch_id, custom_id);
CREATE INDEX batch_lines_state ON batch_lines (batch_id, state, line);
