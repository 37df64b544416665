-- The cluster's trust: its certificate authority, the one-time codes that
-- let a node join, the certificates given to nodes, and where each control
-- plane takes agents (docs/cluster.md).

-- One row. The private key is sealed with AES-GCM under the master key kept
-- in each control plane's data directory, never in the store: someone who
-- reads the store (a backup, a replica) cannot sign a certificate with it.
CREATE TABLE cluster_ca (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    cert_pem   TEXT NOT NULL,
    key_sealed BYTEA NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);

-- Only the sha256 of a join token's secret is kept; the secret is in the
-- code printed once by `llmgw node add`. Used once: used_at and node_id are
-- set by the statement that lets the node in.
CREATE TABLE join_tokens (
    id         TEXT PRIMARY KEY,
    digest     BYTEA NOT NULL UNIQUE,
    name       TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    created_by TEXT NOT NULL,
    used_at    DOUBLE PRECISION,
    node_id    TEXT
);
CREATE INDEX join_tokens_expires ON join_tokens (expires_at);

-- Each certificate a control plane signed for a node: what it is, never a
-- key (the node's private key is made on the node and never leaves it).
CREATE TABLE node_certificates (
    serial      TEXT PRIMARY KEY,
    node_id     TEXT NOT NULL,
    name        TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    issued_at   DOUBLE PRECISION NOT NULL,
    expires_at  DOUBLE PRECISION NOT NULL
);
CREATE INDEX node_certificates_node ON node_certificates (node_id);

-- Where each control plane takes agents, written at its start: a join code
-- names them all, so a node can reach whichever is up.
CREATE TABLE control_planes (
    name          TEXT PRIMARY KEY,
    agent_address TEXT NOT NULL,
    updated_at    DOUBLE PRECISION NOT NULL
);
