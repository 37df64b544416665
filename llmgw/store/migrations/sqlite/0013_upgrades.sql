-- Cluster upgrades (issue 15): the version each control plane runs, written
-- at its start beside its agent address, so that `llmgw ctl status` and an
-- upgrade see every control plane's version, the standbys' too.
ALTER TABLE control_planes ADD COLUMN version TEXT NOT NULL DEFAULT '';

-- The cluster's one upgrade, as far as it got: the plan (which machines, in
-- which order, from which version to which) and each machine's state. Kept
-- in the store so that `llmgw upgrade --resume` carries on from any control
-- plane after the one that ran it stopped. One row; replaced whole, compared
-- and set by its revision so that two control planes cannot both drive it.
CREATE TABLE upgrades (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    revision   INTEGER NOT NULL,
    doc        TEXT NOT NULL,  -- JSON: llmgw.control.upgrade's plan and progress
    updated_at REAL NOT NULL
);
