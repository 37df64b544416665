-- The answer cache's setting per project (`llmgw keys cache`). Only the
-- setting: the answers themselves live in each gateway's memory and are
-- never written here (docs/cache.md). No row is "off", the default; a row
-- with enabled = 0 keeps the TTL and threshold last set, for the record.
CREATE TABLE project_cache (
    project_id TEXT PRIMARY KEY REFERENCES projects (id) ON DELETE CASCADE,
    ttl        REAL NOT NULL,
    -- The cosine similarity a like question must reach, 0..1; NULL reuses
    -- only the answer to the very same request. Not "similar": PostgreSQL
    -- reserves it (SIMILAR TO).
    similarity REAL,
    enabled    INTEGER NOT NULL DEFAULT 1,
    updated_at REAL NOT NULL
);
