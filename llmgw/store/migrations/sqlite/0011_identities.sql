-- Sign-in from the company's directory (issue 14).
--
-- An identity ties a person to a directory's own id for them: the OIDC
-- provider's issuer and subject, LDAP's objectGUID or entryUUID, SCIM's
-- externalId. A renamed person (new mail, new name) is the same account.
CREATE TABLE identities (
    source     TEXT NOT NULL,  -- oidc | ldap | scim
    subject    TEXT NOT NULL,  -- the directory's immutable id for the person
    person_id  TEXT NOT NULL REFERENCES people (id) ON DELETE CASCADE,
    created_at REAL NOT NULL,
    seen_at    REAL NOT NULL,
    PRIMARY KEY (source, subject)
);
CREATE INDEX identities_person ON identities (person_id);

-- Who suspended a person: 'admin' by hand, or the directory that did
-- (ldap, scim). A directory reinstates only those it suspended itself.
ALTER TABLE people ADD COLUMN suspended_by TEXT;

-- Who gave a membership: NULL by hand, or the directory whose group gave
-- it. A sync takes away only what its own directory gave.
ALTER TABLE memberships ADD COLUMN given_by TEXT;

-- Secrets sign-in needs on every control plane (an OIDC client's secret, an
-- LDAP service account's password), sealed under the master key, as the
-- cluster CA's key is: a copy of the store does not carry them.
CREATE TABLE sealed_secrets (
    name       TEXT PRIMARY KEY,
    sealed     BLOB NOT NULL,
    updated_at REAL NOT NULL
);
