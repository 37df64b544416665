"""/admin/mcp: the company's MCP servers, listed, added, disabled, tested and removed (docs/mcp.md).

The portal stands beside the MCP gateway on one floor and imports none of
it: cli/server.py hands `mount` the gateway's own service for this page
(llmgw.mcp.admin.PortalServers), which makes the same Servers calls as
/api/v1/mcp/servers and `llmgw ctl mcp`, audits each change as the person
signed in, and tells the gateway of this process as the admin routes do. A
secret header's value goes from the form to the seal and is never shown
again: the page shows header names only.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from multidict import MultiDictProxy

from llmgw.errors import N_, ExpectedError
from llmgw.portal import i18n
from llmgw.portal.web import LANG, PORTAL, Viewer, add_nav, form, page, redirect, render

add_nav("admin", "/admin/mcp", N_("MCP servers"), "admin")

FIELDS = ("name", "url", "description", "secret_header", "headers", "timeout", "rate")  # kept when refused


@page("/admin/mcp", role="admin")
async def servers(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    return await _page(request)


@page("/admin/mcp/add", methods=("POST",), role="admin")
async def add(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    service = request.app[PORTAL].mcp
    posted = await form(request)
    if service is None:
        return await _page(request, status=503)
    try:
        data = _server(posted)
        view = await service.add(viewer.actor(), data)
    except ExpectedError as e:  # a bad URL, a loopback one, a name taken: said on the page, the form kept
        status = getattr(e, "status", 400)
        kept: dict[str, str | bool] = {f: posted.get(f, "") for f in FIELDS}
        kept.update(allow_private=posted.get("allow_private") == "1", disabled=posted.get("disabled") == "1")
        return await _page(request, status=status if 400 <= status < 500 else 400,
                           error=i18n.say(request[LANG], e), kept=kept)
    said = i18n.gettext(request[LANG], N_("The MCP server {name} was added.")).format(name=view["name"])
    return redirect(request, "/admin/mcp", notice=said)


@page("/admin/mcp/{name}/disable", methods=("POST",), role="admin")
async def disable(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    service = request.app[PORTAL].mcp
    name = request.match_info["name"]
    disabled = (await form(request)).get("disabled") == "1"
    if service is None:
        return await _page(request, status=503)
    try:
        await service.update(viewer.actor(), name, {"disabled": disabled})
    except ExpectedError as e:
        return redirect(request, "/admin/mcp", notice=i18n.say(request[LANG], e))
    said = N_("The MCP server {name} is disabled: its tools are out of every list.") if disabled else \
        N_("The MCP server {name} is enabled again.")
    return redirect(request, "/admin/mcp", notice=i18n.gettext(request[LANG], said).format(name=name))


@page("/admin/mcp/{name}/remove", methods=("POST",), role="admin")
async def remove(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    service = request.app[PORTAL].mcp
    name = request.match_info["name"]
    await form(request)
    if service is None:
        return await _page(request, status=503)
    try:
        await service.remove(viewer.actor(), name)
    except ExpectedError as e:
        return redirect(request, "/admin/mcp", notice=i18n.say(request[LANG], e))
    said = i18n.gettext(request[LANG], N_("The MCP server {name} was removed.")).format(name=name)
    return redirect(request, "/admin/mcp", notice=said)


@page("/admin/mcp/{name}/test", methods=("POST",), role="admin")
async def tools(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    """The server asked for its tools now, with its credentials: the list, or the sentence why not."""
    service = request.app[PORTAL].mcp
    name = request.match_info["name"]
    await form(request)
    if service is None:
        return await _page(request, status=503)
    try:
        tested: dict[str, object] = {"name": name, **await service.test(name), "error": None}
    except ExpectedError as e:
        tested = {"name": name, "tools": [], "error": i18n.say(request[LANG], e)}
    return await _page(request, tested=tested)


async def _page(request: web.Request, *, status: int = 200, error: str | None = None,
                kept: dict[str, str | bool] | None = None, tested: dict[str, object] | None = None) -> web.Response:
    service = request.app[PORTAL].mcp
    listed = [] if service is None else await service.list()
    return render(request, "admin/mcp.html", status=status, title=N_("MCP servers"), servers=listed,
                  served=service is not None, error=error, tested=tested,
                  kept=kept or {**dict.fromkeys(FIELDS, ""), "allow_private": False, "disabled": False})


def _server(posted: MultiDictProxy[str]) -> dict[str, Any]:
    """The form as the fields Servers.add takes (what `ctl mcp add` sends, JSON); Servers checks the rest."""
    data: dict[str, Any] = {"name": posted.get("name", "").strip(), "url": posted.get("url", "").strip(),
                            "description": posted.get("description", "").strip(),
                            "allow_private": posted.get("allow_private") == "1",
                            "disabled": posted.get("disabled") == "1"}
    timeout, rate = posted.get("timeout", "").strip(), posted.get("rate", "").strip()
    if timeout:
        try:
            data["timeout"] = float(timeout)
        except ValueError:
            raise ExpectedError(N_("the timeout is a number of seconds, such as 30")) from None
    if rate:
        if not rate.isdigit():
            raise ExpectedError(N_("the rate is a whole number of calls a minute, such as 60"))
        data["rate"] = int(rate)
    headers: dict[str, str] = {}
    for line in posted.get("headers", "").splitlines():
        if not line.strip():
            continue
        header, colon, value = line.partition(":")
        if not colon or not header.strip() or not value.strip():
            raise ExpectedError(N_("write each plain header on a line of its own as Name: value"))
        headers[header.strip()] = value.strip()
    if headers:
        data["headers"] = headers
    secret_header, secret = posted.get("secret_header", "").strip(), posted.get("secret_value", "").strip()
    if bool(secret_header) != bool(secret):
        raise ExpectedError(N_("a secret header needs both its name and its value"))
    if secret_header:
        data["secrets"] = {secret_header: secret}  # sealed by Servers, as --secret-file's is
    return data
