"""The admin pages under /admin: people, the tree, keys, the audit log and the settings here;
models, nodes, the model mirror, guardrails, the MCP servers and usage beside them (docs/portal.md, "Admin
pages").

Every page calls the same services the admin API and the CLI call (People,
Accounts, the store's tree, validated_change), acting as the person reading
the page: each change is audited as (their e-mail, "portal"). Roles: an
admin sees every page; an operator sees models, nodes and guardrails and gets
403 on the rest; a member gets 403 everywhere under /admin. An org's or a
team's administrator (llmgw.account.scope) sees people, the tree, keys, usage
and the audit log, each page passing viewer.within to its service, so it
shows and changes only what they administer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode

from aiohttp import web

from llmgw.errors import N_
from llmgw.portal.web import Viewer, add_nav, page, render

PER_PAGE = 50


@dataclass(frozen=True)
class Paging:
    """Which slice of a long list a page shows, and the links to the ones either side."""

    number: int  # from 1
    per: int
    total: int

    @property
    def offset(self) -> int:
        return (self.number - 1) * self.per

    @property
    def last(self) -> int:
        return max(1, -(-self.total // self.per))

    def link(self, number: int, base: str, query: Mapping[str, str]) -> str:
        kept = {k: v for k, v in query.items() if v and k != "page"}
        return base + "?" + urlencode({**kept, "page": str(number)})


def page_number(request: web.Request) -> int:
    """?page=N, from 1; anything else is the first page rather than an error."""
    text = request.query.get("page", "1")
    return int(text) if text.isdigit() and 0 < int(text) < 1_000_000 else 1


# The admin row in the order people look for things; this package is imported before its modules, so
# these come first, and the operators' pages (models, nodes, guardrails, usage) add theirs after. No entry
# in the top row: this package is imported before every *_pages module, so it would come first there,
# and the admin row already shows on every page for those who may use it.
# tenants=True: an org's or a team's administrator sees these too, each page keeping to what they administer.
add_nav("admin", "/admin/people", N_("People"), "admin", tenants=True)
add_nav("admin", "/admin/tree", N_("Orgs, teams and projects"), "admin", tenants=True)
add_nav("admin", "/admin/keys", N_("All keys"), "admin", tenants=True)
add_nav("admin", "/admin/audit", N_("Audit log"), "admin", tenants=True)
add_nav("admin", "/admin/settings", N_("Settings"), "admin")


@page("/admin", role="operator", tenants=True)
async def index(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    # The sections are the admin row of the nav, which the frame already keeps to the viewer's role.
    return render(request, "admin/index.html", title=N_("Administration"))
