-- The company's MCP servers behind /mcp (issue 16, docs/mcp.md). One row a
-- server, by the name its tools are prefixed with. `headers` are the plain
-- ones (JSON), `header_refs` the ones read at each call from a file, env:
-- or store: (JSON); `sealed` the secret ones, one JSON object sealed under
-- the master key, whose header names alone are in `secret_names` so that a
-- listing can say which there are without unsealing anything. `version`
-- rises with each change, for the control planes that poll the table.
-- A stdio server's `url` is `stdio:` and its command line; `run_as` is the
-- user it runs as (NULL: llmgw's own unprivileged one, '': the control
-- plane's user).
CREATE TABLE mcp_servers (
    name          TEXT PRIMARY KEY,
    url           TEXT NOT NULL,
    description   TEXT NOT NULL DEFAULT '',
    headers       TEXT NOT NULL DEFAULT '{}',
    header_refs   TEXT NOT NULL DEFAULT '{}',
    secret_names  TEXT NOT NULL DEFAULT '[]',
    sealed        BLOB,
    timeout       REAL NOT NULL,
    rate          INTEGER,
    disabled      INTEGER NOT NULL DEFAULT 0,
    allow_private INTEGER NOT NULL DEFAULT 0,
    run_as        TEXT,
    version       INTEGER NOT NULL,
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL,
    updated_by    TEXT NOT NULL DEFAULT ''
);

-- The tools a level of the tenancy tree grants, as `server.tool` patterns
-- (JSON list); NULL names none here, an empty list closes the level.
ALTER TABLE limits ADD COLUMN tools TEXT;
