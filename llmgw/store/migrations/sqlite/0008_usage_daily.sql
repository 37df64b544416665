-- Usage per person, and sums a day at a time (issue 13). The portal's
-- pages read a person's, a key's or the cluster's days; from raw rows a
-- month of a busy cluster is millions of rows a page. usage_daily holds
-- one row per UTC day, project, key, person and model, kept in step by
-- add_usage in the same transaction as the rows it sums (docs/accounting.md).
-- '' stands for "none" in the key: a primary key column cannot be NULL.
ALTER TABLE usage ADD COLUMN person_id TEXT;
CREATE INDEX usage_person_at ON usage (person_id, at);

CREATE TABLE usage_daily (
    day               INTEGER NOT NULL,  -- UTC days since the epoch: floor(at / 86400)
    project_id        TEXT NOT NULL DEFAULT '',
    key_id            TEXT NOT NULL DEFAULT '',
    person_id         TEXT NOT NULL DEFAULT '',
    model             TEXT NOT NULL,
    requests          INTEGER NOT NULL,
    errors            INTEGER NOT NULL,  -- status 400 and up
    prompt_tokens     INTEGER NOT NULL,
    cached_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cost_micros       INTEGER NOT NULL,
    PRIMARY KEY (day, project_id, key_id, person_id, model)
);
CREATE INDEX usage_daily_person ON usage_daily (person_id, day);
CREATE INDEX usage_daily_key ON usage_daily (key_id, day);
CREATE INDEX usage_daily_project ON usage_daily (project_id, day);

-- The rows written before this version: a key's person is the request's.
-- About 20 s per million rows on SQLite on upgrade (CHANGELOG).
UPDATE usage SET person_id = (SELECT k.person_id FROM api_keys k WHERE k.id = usage.key_id)
 WHERE key_id IS NOT NULL;
-- SQLite's floor() needs its math functions, which not every build has: CAST
-- truncates, which is the floor for every time after 1970.
INSERT INTO usage_daily (day, project_id, key_id, person_id, model, requests, errors,
                         prompt_tokens, cached_tokens, completion_tokens, cost_micros)
SELECT CAST(at / 86400 AS INTEGER), COALESCE(project_id, ''), COALESCE(key_id, ''), COALESCE(person_id, ''), model,
       COUNT(*), SUM(CASE WHEN status >= 400 THEN 1 ELSE 0 END), SUM(prompt_tokens),
       SUM(cached_tokens), SUM(completion_tokens), SUM(cost_micros)
  FROM usage
 GROUP BY CAST(at / 86400 AS INTEGER), COALESCE(project_id, ''), COALESCE(key_id, ''), COALESCE(person_id, ''), model;

-- The guardrails page's latest decisions: the few rows with detail, newest first.
CREATE INDEX usage_guarded_at ON usage (at) WHERE detail <> '{}';
