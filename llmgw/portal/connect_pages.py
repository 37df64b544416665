"""Connect your editor: what each tool needs to use this gateway, with its address, a model and a key.

A reader picks one of their keys by name and prefix, and the snippets show
that prefix where the key goes (the gateway keeps only digests, so it
cannot show an old secret). "Make a key for this tool" makes one in the
chosen project and answers with the same page, the new secret filled in
once, under Cache-Control: no-store. All of it works without JavaScript:
the choices are links and forms.
"""

from __future__ import annotations

import re
from urllib.parse import urlencode

from aiohttp import web

from llmgw.account import AccountError
from llmgw.errors import N_
from llmgw.portal import i18n
from llmgw.portal.member import active, address, max_key_ttl, now, own_project
from llmgw.portal.snippets import NAMES, TOOLS, key_step, placeholder, tools
from llmgw.portal.web import LANG, PORTAL, Viewer, add_nav, form, page, render
from llmgw.store import ApiKey

add_nav("main", "/connect", N_("Connect your editor"), "member")

# Shown until the catalog serves a model, so the snippets still show where the name goes.
NO_MODEL = "MODEL"
# VS Code's address for the extension's URI handler: vscode://PUBLISHER.NAME/PATH.
VSCODE_URI = "vscode://llmgw.llmgw/signin"
# The state llmgw: Sign In makes (32 hexadecimal digits); anything else is dropped, never echoed.
_STATE = re.compile(r"[A-Za-z0-9_-]{8,64}")


@page("/connect", methods=("GET", "POST"))
async def connect(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    portal = request.app[PORTAL]
    query = request.query
    tool = query.get("tool", TOOLS[0])
    chosen_key, model = query.get("key", ""), query.get("model", "")
    state = query.get("state", "")
    secret: str | None = None
    made: dict[str, object] | None = None
    error: str | None = None
    status = 200
    if request.method == "POST":
        posted = await form(request)
        tool, model = posted.get("tool", tool), posted.get("model", model)
        state = posted.get("state", state)
        try:
            path = await own_project(portal, viewer, posted.get("project", ""))
            made, secret = await portal.accounts.create_key(
                viewer.actor(), name=_key_name(request, tool), project=str(path),
                person_email=viewer.person.email, max_key_ttl=max_key_ttl(portal))
        except AccountError as e:
            error, status = i18n.say(request[LANG], e), e.status
    tool = tool if tool in TOOLS else TOOLS[0]
    at = now(request)
    keys = [k for k in await portal.store.list_keys(person_id=viewer.person.id) if active(k, at)]
    picked = _pick(keys, str(made["id"]) if made else chosen_key)
    models = sorted(portal.plane.router.registry.models)
    model = model if model in models else (models[0] if models else NO_MODEL)
    key = secret if secret is not None else placeholder(picked.prefix if picked else None)
    base = address(request)
    state = state if _STATE.fullmatch(state) else ""
    response = render(
        request, "connect.html", status=201 if secret else status,
        title=N_("Connect your editor"), base=base, tool=tool, tools=tools(base=base, model=model, key=key),
        key_step=key_step(key), keys=keys, picked=picked, models=models, model=model, secret=secret,
        made=made, error=error, projects=await portal.people.projects_of(viewer.person.id), state=state,
        open_in_vscode=_open_in_vscode(base, secret, state) if secret and tool == "vscode" else None)
    if secret is not None:
        response.headers["Cache-Control"] = "no-store"
    return response


def _open_in_vscode(base: str, secret: str, state: str) -> str:
    """The link that hands a new key to llmgw for VS Code (its URI handler, llmgw/portal/vscode/extension.js):
    with the state its llmgw: Sign In put in this page's address, it is taken at once; without, the
    extension asks first, naming the gateway."""
    query = {"gateway": base, "key": secret, **({"state": state} if state else {})}
    return f"{VSCODE_URI}?{urlencode(query)}"


def _pick(keys: list[ApiKey], key_id: str) -> ApiKey | None:
    """The key asked for, else the newest: the one a reader most likely means."""
    for k in keys:
        if k.id == key_id:
            return k
    return max(keys, key=lambda k: k.created_at) if keys else None


def _key_name(request: web.Request, tool: str) -> str:
    return i18n.gettext(request[LANG], NAMES.get(tool, N_("Connect your editor")))
