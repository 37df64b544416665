-- Usage summed a day at a time per project and model, and per person and
-- model (issue 13). The cluster's reports (the admin usage page by project,
-- person or model; a team's or an org's spend) and a person's own sum every
-- key of a day; usage_daily holds a row per project, key, person and model
-- each day, so 30 days of a busy cluster is ~130k rows to add up. These
-- rollups hold a row per day, project (or person) and model: 30 days of 100
-- projects and 5 models is 15,000. add_usage keeps them in the same
-- transaction as usage_daily; rebuild_usage_daily rebuilds all three.
CREATE TABLE usage_project_daily (
    day               INTEGER NOT NULL,  -- UTC days since the epoch, as usage_daily
    project_id        TEXT NOT NULL DEFAULT '',  -- '' for requests without a project
    model             TEXT NOT NULL,
    requests          BIGINT NOT NULL,
    errors            BIGINT NOT NULL,
    prompt_tokens     BIGINT NOT NULL,
    cached_tokens     BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    cost_micros       BIGINT NOT NULL,
    PRIMARY KEY (day, project_id, model)
);
CREATE INDEX usage_project_daily_project ON usage_project_daily (project_id, day);

CREATE TABLE usage_person_daily (
    day               INTEGER NOT NULL,
    person_id         TEXT NOT NULL DEFAULT '',  -- '' for requests of no one's key
    model             TEXT NOT NULL,
    requests          BIGINT NOT NULL,
    errors            BIGINT NOT NULL,
    prompt_tokens     BIGINT NOT NULL,
    cached_tokens     BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    cost_micros       BIGINT NOT NULL,
    PRIMARY KEY (day, person_id, model)
);
CREATE INDEX usage_person_daily_person ON usage_person_daily (person_id, day);

-- The days summed before this version, from usage_daily (not the raw rows:
-- it is already a day's sums, so this is quick however many requests there were).
INSERT INTO usage_project_daily (day, project_id, model, requests, errors, prompt_tokens, cached_tokens,
                                 completion_tokens, cost_micros)
SELECT day, project_id, model, SUM(requests), SUM(errors), SUM(prompt_tokens), SUM(cached_tokens),
       SUM(completion_tokens), SUM(cost_micros)
  FROM usage_daily
 GROUP BY day, project_id, model;
INSERT INTO usage_person_daily (day, person_id, model, requests, errors, prompt_tokens, cached_tokens,
                                completion_tokens, cost_micros)
SELECT day, person_id, model, SUM(requests), SUM(errors), SUM(prompt_tokens), SUM(cached_tokens),
       SUM(completion_tokens), SUM(cost_micros)
  FROM usage_daily
 GROUP BY day, person_id, model;
