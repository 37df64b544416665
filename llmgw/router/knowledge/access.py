"""Who may do what with a knowledge base: its owner's keys everything, a grant's keys what it gives.

A knowledge base belongs to a project, a team or an org: every key under
it may search it, add to it and delete it. A grant gives it to another
project, team, org or one key, to read (search it, answer from it) or to
write (add and remove its files too); deleting it stays its owner's. A key
that may not read it is told it is not there (404), never that it is not
theirs, so ids cannot be probed; one that may read but not change it is
told so (403).
"""

from __future__ import annotations

import re

from llmgw.account import Principal
from llmgw.router.call import Refuse
from llmgw.store import KbStore, VectorStore

READ, WRITE, OWN = "read", "write", "own"
_RANK = {READ: 1, WRITE: 2, OWN: 3}
_SAY = {READ: "search it", WRITE: "add to it", OWN: "delete it"}
_ID = re.compile(r"^vs_[A-Za-z0-9]{24}$")


def places_of(principal: Principal) -> list[tuple[str, str]]:
    """The places a key is under, and the key itself, as grants name them."""
    path = principal.path
    return [("org", path.org.id), ("team", path.team.id), ("project", path.project.id), ("key", principal.key.id)]


async def access(store: KbStore, principal: Principal, vs: VectorStore) -> str | None:
    places = places_of(principal)
    if (vs.owner_scope, vs.owner_id) in places:
        return OWN
    best = None
    for grant in await store.kb_grants(vs.id):
        if (grant.scope, grant.scope_id) in places and (best is None or _RANK[grant.access] > _RANK[best]):
            best = grant.access
    return best


async def allowed(store: KbStore, principal: Principal, vs_id: str, need: str, param: str | None = None) -> VectorStore:
    """The knowledge base, if the key may `need` it; else the refusal a client should see."""
    vs = await store.vector_store(vs_id) if isinstance(vs_id, str) and _ID.match(vs_id) else None
    level = await access(store, principal, vs) if vs is not None else None
    if vs is None or level is None:
        raise Refuse(404, f"there is no knowledge base {vs_id} this key may use; GET /v1/vector_stores lists them",
                     "vector_store_not_found", param=param)
    if _RANK[level] < _RANK[need]:
        raise Refuse(403, f"this key may {_SAY[level]} but not {_SAY[need]}: knowledge base {vs_id} was given to it "
                          f"to {'read' if level == READ else 'write'}", "permission_denied", param=param)
    return vs
