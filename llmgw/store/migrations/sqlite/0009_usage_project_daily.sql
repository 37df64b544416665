-- Usage summed a day at a time per project and model (issue 13). The
-- cluster's reports (the admin usage page, a team's or an org's spend) sum
-- every key and person of a day; usage_daily holds a row per key, person and
-- model each day, so 30 days of a busy cluster is ~100k rows to add up.
-- This rollup holds a row per day, project and model: 30 days of 100
-- projects and 5 models is 15,000. add_usage keeps it in the same
-- transaction as usage_daily; rebuild_usage_daily rebuilds both.
CREATE TABLE usage_project_daily (
    day               INTEGER NOT NULL,  -- UTC days since the epoch, as usage_daily
    project_id        TEXT NOT NULL DEFAULT '',  -- '' for requests without a project
    model             TEXT NOT NULL,
    requests          INTEGER NOT NULL,
    errors            INTEGER NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    cached_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cost_micros       INTEGER NOT NULL,
    PRIMARY KEY (day, project_id, model)
);
CREATE INDEX usage_project_daily_project ON usage_project_daily (project_id, day);

-- The days summed before this version, from usage_daily (not the raw rows:
-- it is already a day's sums, so this is quick however many requests there were).
INSERT INTO usage_project_daily (day, project_id, model, requests, errors, prompt_tokens, cached_tokens,
                                 completion_tokens, cost_micros)
SELECT day, project_id, model, SUM(requests), SUM(errors), SUM(prompt_tokens), SUM(cached_tokens),
       SUM(completion_tokens), SUM(cost_micros)
  FROM usage_daily
 GROUP BY day, project_id, model;
