"""The administrator's knowledge bases: listed, made, shown, given, taken back, deleted (docs/knowledge.md).

One service behind the admin API's /api/v1/kb (`llmgw ctl kb`) and the
portal's /admin/kb, so both say and audit the same: each change is in the
audit log as `kb.create`, `kb.delete`, `kb.grant` or `kb.revoke`, target
kb:ID, with the view before and after. A refusal is an AccountError whose
N_() template the portal says in the reader's language and whose status the
admin API answers with. Places are named as people name them (Org,
Org/Team, Org/Team/Project, or a key's id) and kept by id.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from llmgw.account import AccountError, Actor, parse_project_path
from llmgw.errors import N_
from llmgw.kb.naming import new_vector_store_id
from llmgw.kb.passages import DEFAULT_OVERLAP, DEFAULT_TOKENS
from llmgw.store import (
    KB_ACCESS,
    KB_GRANT_SCOPES,
    KB_OWNER_SCOPES,
    KbCounts,
    KbFile,
    KbGrant,
    Store,
    VectorStore,
    shown_name,
)

Audit = Callable[[Actor, str, str, Any, Any], Awaitable[None]]
SHOWN_FILES = 100  # a base's files on its page and in `ctl kb show`, newest first


class KnowledgeBases:
    def __init__(self, store: Store, audit: Audit, embedding_model: Callable[[], str]) -> None:
        self.store = store
        self.audit = audit
        self.embedding_model = embedding_model  # router.knowledge.embedding_model, read at each making

    # --- reading ---------------------------------------------------------------------------------

    async def every(self) -> list[dict[str, Any]]:
        bases = await self.store.all_vector_stores()
        counts = await self.store.vector_store_counts([vs.id for vs in bases])
        return [await self._view(vs, counts.get(vs.id)) for vs in bases]

    async def show(self, kb_id: str) -> dict[str, Any]:
        """{"knowledge_base", "grants", "files"}: what `ctl kb show` prints and the base's page shows."""
        vs = await self._found(kb_id)
        counts = await self.store.vector_store_counts([vs.id])
        files = await self.store.list_kb_files(vs.id, limit=SHOWN_FILES)
        names = {}
        for file in files:
            stored = await self.store.file_by_id(file.file_id)
            if stored is not None:
                names[file.file_id] = shown_name(stored.filename)
        grants = [{"scope": g.scope, "place": await self._named(g.scope, g.scope_id), "id": g.scope_id,
                   "access": g.access}
                  for g in await self.store.kb_grants(vs.id)]
        return {"knowledge_base": await self._view(vs, counts.get(vs.id)), "grants": grants,
                "files": [_file_view(f, names) for f in files]}

    async def readable_names(self, places: list[tuple[str, str]]) -> list[dict[str, str]]:
        """The id and name of each base `readable` lists, and nothing else read: what the chat's picker shows."""
        return [{"id": vs.id, "name": vs.name} for vs in await self.store.list_vector_stores(places, limit=100)]

    async def readable(self, places: list[tuple[str, str]]) -> list[dict[str, Any]]:
        """The bases owned by or given to any of `places` (a project's org, team and project), as listed."""
        bases = await self.store.list_vector_stores(places, limit=100)
        counts = await self.store.vector_store_counts([vs.id for vs in bases])
        return [await self._view(vs, counts.get(vs.id)) for vs in bases]

    # --- changing --------------------------------------------------------------------------------

    async def create(self, actor: Actor, name: str, scope: str, place: str, model: str = "") -> dict[str, Any]:
        name = name.strip()
        if not name:
            raise AccountError(N_("give the knowledge base a name"))
        model = model.strip() or self.embedding_model()
        if not model:
            raise AccountError(N_("name the model that embeds it, or set router.knowledge.embedding_model"))
        if scope not in KB_OWNER_SCOPES:
            raise AccountError(N_("a knowledge base is for a project, a team or an org, not a {scope}"),
                               params={"scope": scope})
        owner = await self._place(scope, place)
        now = time.time()
        vs = VectorStore(new_vector_store_id(), owner, None, name[:256], model, DEFAULT_TOKENS, DEFAULT_OVERLAP, now,
                         now, owner_scope=scope)
        await self.store.add_vector_store(vs)
        view = await self._view(vs, None)
        await self.audit(actor, "kb.create", f"kb:{vs.id}", None, view)
        return view

    async def delete(self, actor: Actor, kb_id: str) -> dict[str, Any]:
        vs = await self._found(kb_id)
        counts = await self.store.vector_store_counts([vs.id])
        view = await self._view(vs, counts.get(vs.id))
        await self.store.delete_vector_store(vs.id)
        await self.audit(actor, "kb.delete", f"kb:{vs.id}", view, None)
        return view

    async def grant(self, actor: Actor, kb_id: str, scope: str, place: str, access: str = "read") -> dict[str, Any]:
        vs = await self._found(kb_id)
        if access not in KB_ACCESS:
            raise AccountError(N_("access is read or write, not {access}"), params={"access": access})
        grant = KbGrant(vs.id, scope, await self._place(scope, place), access)
        await self.store.grant_kb(grant)
        view = {"scope": scope, "place": await self._named(scope, grant.scope_id), "access": access}
        await self.audit(actor, "kb.grant", f"kb:{vs.id}", None, view)
        return view

    async def revoke(self, actor: Actor, kb_id: str, scope: str, place: str) -> dict[str, Any]:
        vs = await self._found(kb_id)
        ident = await self._place(scope, place)
        if not await self.store.revoke_kb(vs.id, scope, ident):
            raise AccountError(N_("knowledge base {kb} was not given to {scope} {place}"), 404, "not_found",
                               params={"kb": vs.id, "scope": scope, "place": place})
        view = {"scope": scope, "place": await self._named(scope, ident)}
        await self.audit(actor, "kb.revoke", f"kb:{vs.id}", view, None)
        return view

    # --- places ----------------------------------------------------------------------------------

    async def _found(self, kb_id: str) -> VectorStore:
        vs = await self.store.vector_store(kb_id)
        if vs is None:
            raise AccountError(N_("there is no knowledge base {kb}; `llmgw ctl kb list` lists them"), 404,
                               "not_found", params={"kb": kb_id})
        return vs

    async def _named(self, scope: str, ident: str) -> str:
        """A place (or a key) as people name it: Org/Team/Project, Org/Team, Org, or the key's name and id."""
        store = self.store
        if scope == "project":
            path = await store.project_path(ident)
            return str(path) if path is not None else ident
        if scope == "team":
            team = await store.team_by_id(ident)
            org = await store.org_by_id(team.org_id) if team is not None else None
            return f"{org.name}/{team.name}" if team is not None and org is not None else ident
        if scope == "org":
            found = await store.org_by_id(ident)
            return found.name if found is not None else ident
        key = await store.key_by_id(ident)
        return f"{key.name} ({ident})" if key is not None else ident

    async def _place(self, scope: str, place: str) -> str:
        """The id of the place (or key) named; refused (404) for one there is not."""
        store = self.store
        place = place.strip()
        found: str | None = None
        if scope == "project":
            try:
                path = await store.project_by_path(*parse_project_path(place))
            except ValueError as e:
                raise AccountError(str(e)) from None
            found = path.project.id if path is not None else None
        elif scope == "team":
            org_name, _, team_name = place.partition("/")
            org = await store.org_by_name(org_name) if team_name and "/" not in team_name else None
            team = await store.team_by_name(org.id, team_name) if org is not None else None
            found = team.id if team is not None else None
        elif scope == "org":
            org = await store.org_by_name(place)
            found = org.id if org is not None else None
        elif scope == "key":
            key = await store.key_by_id(place)
            found = key.id if key is not None else None
        else:
            raise AccountError(N_("scope is one of {scopes}, not {scope}"),
                               params={"scopes": ", ".join(KB_GRANT_SCOPES), "scope": scope})
        if found is None:
            raise AccountError(N_("there is no {scope} {place}; `llmgw ctl tree` shows the places, `llmgw keys list` "
                                  "the keys"), 404, "not_found", params={"scope": scope, "place": place})
        return found

    async def _view(self, vs: VectorStore, counts: KbCounts | None) -> dict[str, Any]:
        counts = counts or KbCounts()
        return {"id": vs.id, "name": vs.name,
                "owner": {"scope": vs.owner_scope, "place": await self._named(vs.owner_scope, vs.owner_id)},
                "embedding_model": vs.embedding_model, "created_at": vs.created_at,
                "last_active_at": vs.last_active_at,
                "files": {"in_progress": counts.in_progress, "completed": counts.completed, "failed": counts.failed,
                          "cancelled": counts.cancelled, "total": counts.total},
                "usage_bytes": counts.usage_bytes, "metadata": vs.metadata}


def _file_view(file: KbFile, names: dict[str, str]) -> dict[str, Any]:
    return {"file_id": file.file_id, "name": names.get(file.file_id, file.file_id), "status": file.status,
            "bytes": file.bytes, "passages": file.passages, "created_at": file.created_at,
            "last_error": file.last_error, "skipped_passages": len(file.skipped)}
