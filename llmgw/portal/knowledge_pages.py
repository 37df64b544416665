"""/knowledge: the knowledge bases a person's projects may answer from, and how to fill them (docs/knowledge.md).

A base belongs to a project, a team or an org, or was given to one; every
key of a project may search the bases this page lists under it, and the chat
offers them. Filling one is `llmgw-kb sync` on the person's own machine:
the page gives the line, with this gateway's address.
"""

from __future__ import annotations

from aiohttp import web

from llmgw.errors import N_
from llmgw.portal.admin.kb import SCOPE_NAMES
from llmgw.portal.member import address, readable_bases
from llmgw.portal.web import PORTAL, Viewer, add_nav, page, render

add_nav("main", "/knowledge", N_("Knowledge bases"), "member")


@page("/knowledge")
async def knowledge(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None  # not a public page: the frame sends the signed-out to /signin
    portal = request.app[PORTAL]
    places = [(path, await readable_bases(portal, path)) for path in await portal.people.projects_of(viewer.person.id)]
    return render(request, "knowledge.html", title=N_("Knowledge bases"), places=places, address=address(request),
                  scope_names=SCOPE_NAMES)
