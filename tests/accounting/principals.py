"""Keys as the router sees them, on a real tree in a real store."""

from __future__ import annotations

from llmgw.account.keycache import Principal
from llmgw.account.limits import effective
from llmgw.store import ApiKey, Limits, ProjectPath, Store


async def principal(store: Store, path: str = "Acme/ml/chat", key: str = "demo",
                    key_id: str | None = None) -> Principal:
    """A key in `path` with the limits the store holds for its chain, read
    as the key cache reads them."""
    org, team, project = path.split("/")
    where: ProjectPath = await store.ensure_project(org, team, project)
    found = await store.key_by_id(key_id or f"key_{key}")
    if found is None:
        found = await store.add_key(ApiKey(id=key_id or f"key_{key}", name=key, project_id=where.project.id,
                                           digest=(key_id or key).encode().ljust(32, b"."), prefix="sk-llmgw-x"))
    chain = [await store.get_limits("org", where.org.id), await store.get_limits("team", where.team.id),
             await store.get_limits("project", where.project.id), await store.get_limits("key", found.id)]
    return Principal(found, where, effective(chain))


async def set_limits(store: Store, scope: str, scope_id: str, **kw) -> None:
    await store.put_limits(Limits(scope, scope_id, **kw))


def offline(path: str = "Acme/ml/chat", name: str = "demo", **limits: dict) -> Principal:
    """A principal built as the key cache builds one, without a store: for
    the parts that never read one (the rate limiter). `limits` maps a scope
    to that level's Limits fields, e.g. team={"rpm": 600}."""
    from llmgw.store import Org, Project, Team

    org, team, project = path.split("/")
    where = ProjectPath(Org(f"org_{org}", org), Team(f"team_{org}_{team}", f"org_{org}", team),
                        Project(f"prj_{org}_{team}_{project}", f"team_{org}_{team}", project))
    found = ApiKey(id=f"key_{name}", name=name, project_id=where.project.id,
                   digest=name.encode().ljust(32, b"."), prefix="sk-llmgw-x")
    ids = {"org": where.org.id, "team": where.team.id, "project": where.project.id, "key": found.id}
    chain = [Limits(scope, ids[scope], **limits[scope]) if scope in limits else None
             for scope in ("org", "team", "project", "key")]
    return Principal(found, where, effective(chain))
