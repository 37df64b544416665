"""/admin/kb: the company's knowledge bases, made for a place, given to others, and deleted (docs/knowledge.md).

The same service as `llmgw ctl kb` and /api/v1/kb (llmgw.kb.KnowledgeBases),
acting as the person signed in: each change is in the audit log under their
e-mail. What a base holds is filled by its people with `llmgw-kb` or the
/v1 API, never here; deleting one removes its passages from every control
plane's index within a second or two.
"""

from __future__ import annotations

from aiohttp import web

from llmgw.errors import N_, ExpectedError
from llmgw.portal import i18n
from llmgw.portal.web import LANG, PORTAL, Viewer, add_nav, form, page, redirect, render

add_nav("admin", "/admin/kb", N_("Knowledge bases"), "admin")

OWNER_KINDS = {"project": N_("a project (Org/Team/Project)"), "team": N_("a team (Org/Team)"),
               "org": N_("an org")}
GRANT_KINDS = {**OWNER_KINDS, "key": N_("one key (its id)")}
ACCESS = {"read": N_("read: search it and answer from it"), "write": N_("write: add and remove its files too")}
SCOPE_NAMES = {"project": N_("project"), "team": N_("team"), "org": N_("org"), "key": N_("key")}
ACCESS_NAMES = {"read": N_("may read"), "write": N_("may write")}
STATUS_NAMES = {"completed": N_("ready"), "in_progress": N_("being read"), "failed": N_("failed"),
                "cancelled": N_("cancelled")}
MADE_FIELDS = ("name", "scope", "place", "embedding_model")  # kept when refused


@page("/admin/kb", role="admin")
async def bases(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    return await _list(request)


@page("/admin/kb/create", methods=("POST",), role="admin")
async def create(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    posted = await form(request)
    kept = {f: posted.get(f, "").strip() for f in MADE_FIELDS}
    try:
        view = await request.app[PORTAL].knowledge.create(viewer.actor(), kept["name"], kept["scope"], kept["place"],
                                                          kept["embedding_model"])
    except ExpectedError as e:
        return await _list(request, status=_status(e), error=i18n.say(request[LANG], e), kept=kept)
    said = i18n.gettext(request[LANG], N_("The knowledge base {name} was made."))
    return redirect(request, f"/admin/kb/{view['id']}", notice=said.format(name=view["name"]))


@page("/admin/kb/{kb_id}", role="admin")
async def base(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    return await _one(request)


@page("/admin/kb/{kb_id}/grant", methods=("POST",), role="admin")
async def grant(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    kb_id = request.match_info["kb_id"]
    posted = await form(request)
    kept = {f: posted.get(f, "").strip() for f in ("scope", "place", "access")}
    try:
        view = await request.app[PORTAL].knowledge.grant(viewer.actor(), kb_id, kept["scope"], kept["place"],
                                                         kept["access"] or "read")
    except ExpectedError as e:
        return await _one(request, status=_status(e), error=i18n.say(request[LANG], e), kept=kept)
    said = i18n.gettext(request[LANG], N_("It was given to {place}."))
    return redirect(request, f"/admin/kb/{kb_id}", notice=said.format(place=view["place"]))


@page("/admin/kb/{kb_id}/revoke", methods=("POST",), role="admin")
async def revoke(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    kb_id = request.match_info["kb_id"]
    posted = await form(request)
    try:
        view = await request.app[PORTAL].knowledge.revoke(viewer.actor(), kb_id, posted.get("scope", ""),
                                                          posted.get("place", ""))
    except ExpectedError as e:
        return redirect(request, f"/admin/kb/{kb_id}", notice=i18n.say(request[LANG], e))
    said = i18n.gettext(request[LANG], N_("It was taken back from {place}."))
    return redirect(request, f"/admin/kb/{kb_id}", notice=said.format(place=view["place"]))


@page("/admin/kb/{kb_id}/delete", methods=("POST",), role="admin")
async def delete(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    await form(request)
    view = await request.app[PORTAL].knowledge.delete(viewer.actor(), request.match_info["kb_id"])
    said = i18n.gettext(request[LANG], N_("The knowledge base {name} and its passages were deleted."))
    return redirect(request, "/admin/kb", notice=said.format(name=view["name"]))


def _status(refused: ExpectedError) -> int:
    """The page's status for a refusal the service said: its own when it is the person's to mend, else 400."""
    status = getattr(refused, "status", 400)
    return status if isinstance(status, int) and 400 <= status < 500 else 400


async def _list(request: web.Request, *, status: int = 200, error: str | None = None,
                kept: dict[str, str] | None = None) -> web.Response:
    listed = await request.app[PORTAL].knowledge.every()
    default_model = request.app[PORTAL].plane.settings.current.router.knowledge.embedding_model
    return render(request, "admin/kb.html", status=status, title=N_("Knowledge bases"), bases=listed,
                  error=error, kept=kept or {**dict.fromkeys(MADE_FIELDS, ""), "scope": "project"},
                  owner_kinds=OWNER_KINDS, default_model=default_model, scope_names=SCOPE_NAMES)


async def _one(request: web.Request, *, status: int = 200, error: str | None = None,
               kept: dict[str, str] | None = None) -> web.Response:
    shown = await request.app[PORTAL].knowledge.show(request.match_info["kb_id"])
    return render(request, "admin/kb_base.html", status=status, title=N_("A knowledge base"), shown=shown,
                  error=error, kept=kept or {"scope": "project", "place": "", "access": "read"},
                  grant_kinds=GRANT_KINDS, access=ACCESS, scope_names=SCOPE_NAMES, access_names=ACCESS_NAMES,
                  status_names=STATUS_NAMES)
