"""The project a key is made in, as a person typed it: it must exist, and a near miss is named.

A typo in `llmgw keys create --project` once made a new org, team and project
on the way, with none of the limits the company had set: the key escaped every
budget and rate limit above it (issue 25). So a key goes only into a project
that exists, and a path that names none is refused with the nearest paths
there are. Places are made on purpose: `llmgw ctl tree add`, or `--create` on
`llmgw keys create` (`create=True` here), which `llmgw server init` also uses
for the first key's project on an empty store.
"""

from __future__ import annotations

import difflib

from llmgw.account.errors import AccountError
from llmgw.account.scope import Walls
from llmgw.errors import N_
from llmgw.store import KeysStore, ProjectPath

# How alike two paths must be to be offered (difflib's ratio). A typo scores above 0.9 ("Acme/ml/trian" and
# "Acme/ml/train" 0.92, "Acmee/ml/train" 0.96), but siblings share their org and team, which alone lifts
# "Acme/ml/serve" to 0.69 against "Acme/ml/trian": at difflib's 0.6 it was offered too.
NEAR = 0.8


async def project_for_key(store: KeysStore, org: str, team: str, project: str, *, create: bool,
                          within: Walls | None = None) -> ProjectPath:
    """The project ORG/TEAM/PROJECT, made on the way only when `create` says so.

    `within`: a tenant administrator's walls (scope.py). Only their projects
    are found or offered as near misses, and `create` makes a project only in a
    team they hold, never a team or an org."""
    if within is not None and within.scope.tenant:
        found_org = await store.org_by_name(org)
        found_team = await store.team_by_name(found_org.id, team) if found_org else None
        if found_team is not None and within.scope.holds_team(found_team):
            if create:
                return await store.ensure_project(org, team, project)
            held = await store.project_by_path(org, team, project)
            if held is not None:
                return held
        create = False
    if create:
        return await store.ensure_project(org, team, project)
    found = None if within is not None and within.scope.tenant else await store.project_by_path(org, team, project)
    if found is not None:
        return found
    typed = f"{org}/{team}/{project}"
    near = difflib.get_close_matches(typed, await project_paths(store, within), n=3, cutoff=NEAR)
    if near:
        raise AccountError(N_("there is no project {path}: did you mean {near}? A key goes only into a project "
                              "that exists; make a new one on purpose with llmgw ctl tree add, or create the key "
                              "with --create"), 404, "not_found", params={"path": typed, "near": " or ".join(near)})
    raise AccountError(N_("there is no project {path}, nor one near it (llmgw ctl tree lists them); a key goes only "
                          "into a project that exists: make a new one on purpose with llmgw ctl tree add, or create "
                          "the key with --create"), 404, "not_found", params={"path": typed})


async def project_paths(store: KeysStore, within: Walls | None = None) -> list[str]:
    """Every project as ORG/TEAM/PROJECT; only those inside `within`'s walls when given."""
    orgs = {o.id: o.name for o in await store.list_orgs()}
    teams = {t.id: f"{orgs.get(t.org_id, t.org_id)}/{t.name}" for t in await store.list_teams()
             if within is None or await within.team(t.id)}
    return sorted(f"{teams[p.team_id]}/{p.name}" for p in await store.list_projects() if p.team_id in teams)
