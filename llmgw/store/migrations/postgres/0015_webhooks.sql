-- Notification webhooks (issue 16): where the events bus's events go
-- (llmgw/notify). The signing secret is sealed under the master key, as the
-- cluster CA's key is: a copy of the store does not carry it.
CREATE TABLE webhooks (
    id            TEXT PRIMARY KEY,
    url           TEXT NOT NULL,
    events        TEXT NOT NULL,  -- JSON: the kinds sent, or ["*"] for all
    format        TEXT NOT NULL CHECK (format IN ('json', 'slack')),
    secret_sealed BYTEA,             -- NULL: sent unsigned
    allow_private BOOLEAN NOT NULL DEFAULT FALSE,
    enabled       BOOLEAN NOT NULL DEFAULT TRUE,
    created_at    DOUBLE PRECISION NOT NULL
);

-- One row per event and webhook, written before anything is sent, so that a
-- restart or a new leader sends what was pending and nothing is lost.
-- once_key makes an event that happens once (a budget's 80 % in a period)
-- one delivery per webhook, whichever control plane saw it; the others have
-- the delivery's own id there.
CREATE TABLE webhook_deliveries (
    id              TEXT PRIMARY KEY,
    webhook_id      TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_kind      TEXT NOT NULL,
    once_key        TEXT NOT NULL,
    body            TEXT NOT NULL,  -- JSON: the event, as the webhook is sent it
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at DOUBLE PRECISION NOT NULL,
    state           TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    last_status     INTEGER,
    last_error      TEXT NOT NULL DEFAULT '',
    created_at      DOUBLE PRECISION NOT NULL,
    delivered_at    DOUBLE PRECISION,
    UNIQUE (webhook_id, once_key)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (state, next_attempt_at);
CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook_id, created_at);
