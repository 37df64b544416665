-- People in the portal (issue 13): a language, a password to change at the
-- next sign-in after a reset, and when the password last changed.
ALTER TABLE people ADD COLUMN locale TEXT;
ALTER TABLE people ADD COLUMN must_change_password BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE people ADD COLUMN password_changed_at DOUBLE PRECISION;

-- 0001's sessions were written only by tests, so they are remade rather
-- than altered. The id is the sha256 hex of the cookie's token, so a copy of
-- the store gives no one a cookie; chat_digest is the sha256 of the
-- session's chat credential, which /v1 looks up.
DROP TABLE sessions;
CREATE TABLE sessions (
    id           TEXT PRIMARY KEY,
    person_id    TEXT NOT NULL REFERENCES people (id) ON DELETE CASCADE,
    created_at   DOUBLE PRECISION NOT NULL,
    last_seen_at DOUBLE PRECISION NOT NULL,
    expires_at   DOUBLE PRECISION NOT NULL,
    chat_digest  BYTEA NOT NULL UNIQUE,
    address      TEXT NOT NULL DEFAULT '',
    agent        TEXT NOT NULL DEFAULT ''
);
CREATE INDEX sessions_person ON sessions (person_id);

-- Who may use what: a membership of an org or a team covers every project
-- below it. scope_id is not a foreign key, as it points into one of three
-- tables; the tree's rows are never deleted.
CREATE TABLE memberships (
    person_id  TEXT NOT NULL REFERENCES people (id) ON DELETE CASCADE,
    scope      TEXT NOT NULL CHECK (scope IN ('org', 'team', 'project')),
    scope_id   TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (person_id, scope, scope_id)
);
CREATE INDEX memberships_scope ON memberships (scope, scope_id);

-- Failed sign-ins, counted over a window to throttle guessing:
-- subject is 'account:<email_key>' or 'address:<ip>'. Pruned on write.
CREATE TABLE sign_in_failures (
    subject TEXT NOT NULL,
    at      DOUBLE PRECISION NOT NULL
);
CREATE INDEX sign_in_failures_subject_at ON sign_in_failures (subject, at);
