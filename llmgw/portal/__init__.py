"""The portal: web pages on the client port for people, to sign in, chat, make keys and see usage,
and for administrators (docs/portal.md).

It stands on floor 2, above control (docs/internals.md). Control builds the
client app and cannot import the portal, so cli/server.py hands `mount` to
`serve(..., extend=)` and `run_worker(..., extend=)`, and control calls it
with the app and the process serving it. web.py is the frame every page
stands in; a page module is any `*_pages.py` here or any module of
portal/admin/, found and imported by `mount`.
"""

from __future__ import annotations

import importlib
import pkgutil

from aiohttp import web

from llmgw.account import Accounts, Sessions
from llmgw.accounting import UsageReports
from llmgw.auth import DirectoryAccounts, Secrets
from llmgw.config import own_secrets
from llmgw.kb import KnowledgeBases
from llmgw.portal.plane import McpServers, PortalPlane
from llmgw.portal.web import (
    PAGES,
    PORTAL,
    Page,
    Portal,
    Registry,
    environment,
    load_static,
    not_found,
    serve_static,
    wrap,
)

__all__ = ["PORTAL", "McpServers", "Portal", "PortalPlane", "mount", "page_modules"]


def page_modules() -> list[str]:
    """The modules that register pages: llmgw.portal.*_pages and every module of llmgw.portal.admin."""
    here = importlib.import_module("llmgw.portal")
    names = [f"llmgw.portal.{m.name}" for m in pkgutil.iter_modules(here.__path__) if m.name.endswith("_pages")]
    try:
        admin = importlib.import_module("llmgw.portal.admin")
    except ModuleNotFoundError:
        admin = None
    if admin is not None:
        names += [f"llmgw.portal.admin.{m.name}" for m in pkgutil.iter_modules(admin.__path__)]
    return sorted(names)


def registered() -> Registry:
    """Every page and nav entry, once their modules are imported (importing registers them)."""
    for name in page_modules():
        importlib.import_module(name)
    return PAGES


def mount(app: web.Application, plane: PortalPlane, *, registry: Registry | None = None,
          mcp: McpServers | None = None) -> None:
    """Add the portal's pages to a client app; `plane` is the process serving it (plane.py).

    `registry` is for tests that add a page of their own; by default every page module's pages.
    `mcp` is the MCP servers' service for /admin/mcp (llmgw.mcp.admin.PortalServers), handed in by
    cli/server.py since the portal and the MCP gateway stand side by side on one floor; None: that page
    says the MCP gateway is not served here.
    """
    pages = registered() if registry is None else registry
    store = plane.store
    accounts = Accounts(store, plane.router.events)  # a key revoked here is told to the webhooks
    portal = Portal(plane=plane, store=store, accounts=accounts, people=accounts.people,
                    sessions=Sessions(store, lambda: plane.settings.current.auth),
                    reports=UsageReports(store),
                    secrets=Secrets(store, plane.cfg.data_dir, own_secrets(plane.cfg)),
                    directory=DirectoryAccounts(store, accounts.people, accounts.audit,
                                                break_glass=lambda: plane.settings.current.auth.break_glass),
                    knowledge=KnowledgeBases(store, accounts.audit,
                                             lambda: plane.settings.current.router.knowledge.embedding_model),
                    env=environment(), registry=pages, static=load_static(), mcp=mcp)
    app[PORTAL] = portal
    for portal_page in pages.pages:
        handler = wrap(portal_page)
        for method in portal_page.methods:
            if method == "GET":
                app.router.add_get(portal_page.path, handler)  # and HEAD
            else:
                app.router.add_route(method, portal_page.path, handler)
    app.router.add_get("/static/{digest}/{name}", serve_static)
    # Every other path but /v1's gets the portal's 404 page; make_client_app's catch-all, added after
    # this, keeps answering /v1 in the API's JSON.
    app.router.add_route("*", r"/{tail:(?!v1(?:/|$)).*}", wrap(Page("/{tail}", not_found, public=True)))
