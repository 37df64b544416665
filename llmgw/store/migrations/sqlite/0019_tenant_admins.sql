-- Tenant administrators (issue 31, docs/people.md): a person's membership of
-- an org or a team may also make them its administrator, who adds and
-- suspends its people, makes and revokes its keys, sets limits below it and
-- reads its usage and audit log, and nothing above or beside it.
ALTER TABLE memberships ADD COLUMN administers INTEGER NOT NULL DEFAULT 0;

-- A person's own tokens for the admin API (`llmgw people token`, the
-- profile page): what a tenant administrator gives `llmgw ctl` in place of
-- the cluster's admin token. Only the sha256 is kept, as for API keys; the
-- shown prefix tells them apart.
CREATE TABLE person_tokens (
    id           TEXT PRIMARY KEY,
    person_id    TEXT NOT NULL REFERENCES people (id) ON DELETE CASCADE,
    digest       BLOB NOT NULL UNIQUE,
    prefix       TEXT NOT NULL,
    created_at   REAL NOT NULL,
    last_used_at REAL,
    revoked_at   REAL
);
CREATE INDEX person_tokens_person ON person_tokens (person_id, created_at);
