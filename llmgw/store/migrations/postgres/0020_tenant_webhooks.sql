-- A tenant administrator's webhook (issue 31): the org or team whose events
-- it is sent ('org:ID' or 'team:ID'), none of the cluster's own; empty for
-- the cluster's webhooks, sent every event they ask for.
ALTER TABLE webhooks ADD COLUMN place TEXT NOT NULL DEFAULT '';
