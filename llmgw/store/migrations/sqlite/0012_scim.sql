-- SCIM 2.0 provisioning (issue 14): what a provider (Entra ID, Okta) keeps
-- of the people and groups it pushes, beside the accounts themselves.
--
-- A SCIM user is a person as the provider made them: its id is ours (the
-- identity's subject, source 'scim'), userName and externalId are the
-- provider's, and the rest of what it sent (name parts, e-mails, an
-- extension) is kept as JSON so that it reads back as it was written. The
-- person's e-mail, name and suspension stay in people: one account.
CREATE TABLE scim_users (
    id            TEXT PRIMARY KEY,
    person_id     TEXT NOT NULL UNIQUE REFERENCES people (id) ON DELETE CASCADE,
    user_name     TEXT NOT NULL,
    user_name_key TEXT NOT NULL UNIQUE,  -- userName folded: unique without regard to case (RFC 7643 2.1)
    external_id   TEXT,
    data          TEXT NOT NULL,  -- the attributes as sent, JSON
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL
);

-- A SCIM group: its displayName is what auth.scim.roles and memberships name.
CREATE TABLE scim_groups (
    id           TEXT PRIMARY KEY,
    display_name TEXT NOT NULL,
    display_key  TEXT NOT NULL UNIQUE,  -- displayName folded: the maps match without regard to case
    external_id  TEXT,
    created_at   REAL NOT NULL,
    updated_at   REAL NOT NULL
);

CREATE TABLE scim_group_members (
    group_id  TEXT NOT NULL REFERENCES scim_groups (id) ON DELETE CASCADE,
    person_id TEXT NOT NULL REFERENCES people (id) ON DELETE CASCADE,
    PRIMARY KEY (group_id, person_id)
);
CREATE INDEX scim_group_members_person ON scim_group_members (person_id);
