-- Usage summed a day at a time per project, and per person, over every model
-- (issue 13). The admin usage page by project or by person shows a day's
-- total per project (or person); read from the rollups of 0009 that is 15,000
-- rows for 30 days of 100 projects and 5 models, summed again to 3,000 on
-- every view. These hold the 3,000 themselves: the page reads them as they
-- are, with no GROUP BY. add_usage keeps them in the same transaction as
-- usage_daily and the rollups; rebuild_usage_daily rebuilds them too.
CREATE TABLE usage_project_day_totals (
    day               INTEGER NOT NULL,  -- UTC days since the epoch, as usage_daily
    project_id        TEXT NOT NULL DEFAULT '',  -- '' for requests without a project
    requests          INTEGER NOT NULL,
    errors            INTEGER NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    cached_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cost_micros       INTEGER NOT NULL,
    PRIMARY KEY (day, project_id)
);

CREATE TABLE usage_person_day_totals (
    day               INTEGER NOT NULL,
    person_id         TEXT NOT NULL DEFAULT '',  -- '' for requests of no one's key
    requests          INTEGER NOT NULL,
    errors            INTEGER NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    cached_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cost_micros       INTEGER NOT NULL,
    PRIMARY KEY (day, person_id)
);

-- The days summed before this version, from the rollups of 0009 (already a
-- day's sums per model, so this is quick however many requests there were).
INSERT INTO usage_project_day_totals (day, project_id, requests, errors, prompt_tokens, cached_tokens,
                                      completion_tokens, cost_micros)
SELECT day, project_id, SUM(requests), SUM(errors), SUM(prompt_tokens), SUM(cached_tokens),
       SUM(completion_tokens), SUM(cost_micros)
  FROM usage_project_daily
 GROUP BY day, project_id;
INSERT INTO usage_person_day_totals (day, person_id, requests, errors, prompt_tokens, cached_tokens,
                                     completion_tokens, cost_micros)
SELECT day, person_id, SUM(requests), SUM(errors), SUM(prompt_tokens), SUM(cached_tokens),
       SUM(completion_tokens), SUM(cost_micros)
  FROM usage_person_daily
 GROUP BY day, person_id;
