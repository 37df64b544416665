-- Single sign-on's states once used (issue 25): a callback replayed with the
-- same flow cookie, state and code is refused on every control plane and
-- worker, not only by a provider that refuses a reused code. The digest is
-- sha256 of the state; a row is forgotten once its flow would have expired.
CREATE TABLE spent_sign_ins (
    digest   TEXT PRIMARY KEY,
    until_at REAL NOT NULL
);
CREATE INDEX spent_sign_ins_until ON spent_sign_ins (until_at);
