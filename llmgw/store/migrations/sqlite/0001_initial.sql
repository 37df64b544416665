-- The first schema. Times are seconds since the epoch (REAL), money whole
-- micro-units (INTEGER), documents JSON text: the same values PostgreSQL's
-- schema holds, so a store can move between the two.

CREATE TABLE people (
    id            TEXT PRIMARY KEY,
    email         TEXT NOT NULL,
    -- The email casefolded by llmgw, not by SQL: SQLite's lower() knows
    -- only ASCII and PostgreSQL's follows the cluster's locale, and a
    -- person must be found the same way on both.
    email_key     TEXT NOT NULL UNIQUE,
    name          TEXT NOT NULL,
    role          TEXT NOT NULL DEFAULT 'member',
    password_hash TEXT,
    created_at    REAL NOT NULL,
    disabled      INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE sessions (
    id         TEXT PRIMARY KEY,
    person_id  TEXT NOT NULL REFERENCES people (id) ON DELETE CASCADE,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX sessions_person ON sessions (person_id);

CREATE TABLE orgs (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL
);

CREATE TABLE teams (
    id         TEXT PRIMARY KEY,
    org_id     TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE (org_id, name)
);

CREATE TABLE projects (
    id         TEXT PRIMARY KEY,
    team_id    TEXT NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE (team_id, name)
);

CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    project_id TEXT NOT NULL REFERENCES projects (id),
    person_id  TEXT REFERENCES people (id) ON DELETE SET NULL,
    digest     BLOB NOT NULL UNIQUE,
    prefix     TEXT NOT NULL,
    band       TEXT,
    created_at REAL NOT NULL,
    expires_at REAL,
    revoked_at REAL
);
CREATE INDEX api_keys_project ON api_keys (project_id);

CREATE TABLE limits (
    scope         TEXT NOT NULL,
    scope_id      TEXT NOT NULL,
    rpm           INTEGER,
    tpm           INTEGER,
    budget_micros INTEGER,
    period        TEXT,
    models        TEXT,
    expires_at    REAL,
    PRIMARY KEY (scope, scope_id)
);

-- No foreign keys on usage: a request's record outlives its key, and the
-- batched writer must never lose a batch over a key deleted meanwhile.
CREATE TABLE usage (
    id                TEXT PRIMARY KEY,
    at                REAL NOT NULL,
    key_id            TEXT,
    project_id        TEXT,
    model             TEXT NOT NULL,
    endpoint          TEXT NOT NULL DEFAULT '',
    status            INTEGER NOT NULL DEFAULT 200,
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    cached_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cost_micros       INTEGER NOT NULL DEFAULT 0,
    ttft_ms           REAL,
    duration_ms       REAL NOT NULL DEFAULT 0,
    cache             TEXT,
    detail            TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX usage_at ON usage (at);
CREATE INDEX usage_key_at ON usage (key_id, at);
CREATE INDEX usage_project_at ON usage (project_id, at);

CREATE TABLE audit (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    at          REAL NOT NULL,
    actor       TEXT NOT NULL,
    via         TEXT NOT NULL,
    action      TEXT NOT NULL,
    target      TEXT NOT NULL,
    before_json TEXT,
    after_json  TEXT
);
CREATE INDEX audit_at ON audit (at);
CREATE INDEX audit_target_at ON audit (target, at);

CREATE TABLE leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    address    TEXT NOT NULL,
    expires_at REAL NOT NULL,
    epoch      INTEGER NOT NULL
);

CREATE TABLE settings (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    version    INTEGER NOT NULL,
    doc        TEXT NOT NULL,
    updated_at REAL NOT NULL,
    updated_by TEXT NOT NULL
);
