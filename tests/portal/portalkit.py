"""The portal mounted in process over a real store, and a browser-like client for it (for every portal test)."""

from __future__ import annotations

import re
from http.cookies import SimpleCookie
from types import SimpleNamespace

import aiohttp
from aiohttp import web

from llmgw.config import ClusterSettings, ServerConfig
from llmgw.events import Events
from llmgw.portal import mount, registered
from llmgw.portal.web import Registry

PASSWORD = "correct horse battery"


class Plane:
    """What the portal reads of the process serving it, over the test's store; add what your pages need."""

    def __init__(self, store, settings: ClusterSettings | None = None):
        self.store = store
        self.settings = SimpleNamespace(current=settings or ClusterSettings())
        self.cfg = ServerConfig()  # data_dir: where sign-in's master key would be; these pages read none
        self.router = SimpleNamespace(events=Events())  # told of a key revoked here, as a router's are


def portal_app(store, settings: ClusterSettings | None = None, *, pages: Registry | None = None,
               plane=None) -> web.Application:
    """An app with the portal's pages (every page module's, or `pages`) over `store`."""
    app = web.Application()
    mount(app, plane or Plane(store, settings), registry=pages if pages is not None else registered())
    return app


def set_cookies(response) -> dict:
    """The cookies a response sets, by name, with their attributes."""
    found = {}
    for header in response.headers.getall("Set-Cookie", []):
        cookie = SimpleCookie()
        cookie.load(header)
        for name in cookie:
            found[name] = cookie[name]
    return found


def csrf_in(page: str) -> str:
    """The CSRF value of the first form on a page."""
    found = re.search(r'name="_csrf" value="([^"]+)"', page)
    assert found, f"no form with a CSRF value on this page:\n{page[:2000]}"
    return found.group(1)


async def csrf_from(client, path: str = "/signin") -> str:
    return csrf_in(await (await client.get(path)).text())


async def sign_in(client, email: str, *, password: str = PASSWORD, next_: str = "/",
                  csrf: str | None = None) -> aiohttp.ClientResponse:
    """Post the sign-in form as a browser would; the answer is not followed (303 on success)."""
    csrf = csrf or await csrf_from(client)
    return await client.post("/signin", data={"_csrf": csrf, "email": email, "password": password, "next": next_},
                             allow_redirects=False)
