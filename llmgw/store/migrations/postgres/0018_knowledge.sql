-- Knowledge bases, as OpenAI's vector stores (issue 29, docs/knowledge.md).

-- A knowledge base (vs_…): whose it is (a project, a team or an org: every key
-- under it may read, add to and delete it), the model that embeds its passages,
-- and how its files are cut into passages.
CREATE TABLE vector_stores (
    id              TEXT PRIMARY KEY,
    owner_scope     TEXT NOT NULL DEFAULT 'project',
    owner_id        TEXT NOT NULL,
    key_id          TEXT,
    name            TEXT NOT NULL,
    embedding_model TEXT NOT NULL,
    chunk_tokens    INTEGER NOT NULL,
    chunk_overlap   INTEGER NOT NULL,
    created_at      DOUBLE PRECISION NOT NULL,
    last_active_at  DOUBLE PRECISION NOT NULL,
    metadata        TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX vector_stores_owner ON vector_stores (owner_scope, owner_id, created_at);

-- A knowledge base given to keys beyond its owner's: those of a project, a
-- team, an org, or one key; access 'read' (search, answer from) or 'write'
-- (add and remove files too).
CREATE TABLE kb_grants (
    vector_store_id TEXT NOT NULL REFERENCES vector_stores (id) ON DELETE CASCADE,
    scope           TEXT NOT NULL,
    scope_id        TEXT NOT NULL,
    access          TEXT NOT NULL,
    PRIMARY KEY (vector_store_id, scope, scope_id)
);
CREATE INDEX kb_grants_scope ON kb_grants (scope, scope_id);

-- A file of /v1/files in a knowledge base: in_progress while it is read and
-- embedded, then completed (with its passages), failed or cancelled. `skipped`:
-- the passages the guardrails refused to send to the embedding model, left out.
-- `batch_id`: the file batch (vsfb_…) that added it, if one did.
CREATE TABLE vector_store_files (
    vector_store_id TEXT NOT NULL REFERENCES vector_stores (id) ON DELETE CASCADE,
    file_id         TEXT NOT NULL,
    key_id          TEXT,
    batch_id        TEXT,
    status          TEXT NOT NULL,
    created_at      DOUBLE PRECISION NOT NULL,
    bytes           INTEGER NOT NULL,
    passages        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT,
    skipped         TEXT NOT NULL DEFAULT '[]',
    attributes      TEXT NOT NULL DEFAULT '{}',
    chunk_tokens    INTEGER NOT NULL,
    chunk_overlap   INTEGER NOT NULL,
    PRIMARY KEY (vector_store_id, file_id)
);
CREATE INDEX vector_store_files_file ON vector_store_files (file_id);
CREATE INDEX vector_store_files_batch ON vector_store_files (vector_store_id, batch_id);

-- The passages of a file and their vectors (float32, little-endian). Each
-- control plane searches the vectors in an index of its own, built from
-- here and kept current from kb_changes; the words by passages_words.
CREATE TABLE passages (
    id              BIGSERIAL PRIMARY KEY,
    vector_store_id TEXT NOT NULL,
    file_id         TEXT NOT NULL,
    ordinal         INTEGER NOT NULL,
    text            TEXT NOT NULL,
    vector          BYTEA NOT NULL
);
CREATE INDEX passages_file ON passages (vector_store_id, file_id);

CREATE INDEX passages_words ON passages USING GIN (to_tsvector('english', text));

-- What changed, in order: each control plane's vector index follows it.
-- op: 'add' (a file's passages), 'remove' (a file's), 'drop' (a whole knowledge base).
CREATE TABLE kb_changes (
    seq             BIGSERIAL PRIMARY KEY,
    vector_store_id TEXT NOT NULL,
    file_id         TEXT,
    op              TEXT NOT NULL,
    at              DOUBLE PRECISION NOT NULL
);
