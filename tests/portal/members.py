"""What the member pages' tests share: two people in projects of their own, the portal over a real store.

In process: the portal mounted on an aiohttp app over the test's store (both
dialects), with a fixed clock (the pages' "today" and "this month") and a
plane that records which keys the pages told it to forget.
"""

from __future__ import annotations

import datetime as dt
import html.parser
import re
from dataclasses import replace
from types import SimpleNamespace

from aiohttp import web

from llmgw.account import Accounts, Actor
from llmgw.config import ClusterSettings, ServerConfig
from llmgw.events import Events
from llmgw.portal import mount
from llmgw.portal.member import CLOCK

ROOT = Actor("root", "cli")
PASSWORD = "correct horse battery"
NOW = dt.datetime(2026, 3, 15, 12, 0, tzinfo=dt.UTC).timestamp()
DAY = 86400


class Keys:
    """The plane's key cache, as far as the pages use it: they tell it which keys to forget."""

    def __init__(self):
        self.invalidated: list[str] = []

    def remembers(self, secret: str) -> bool:
        return False

    async def lookup(self, secret: str):
        return None

    def invalidate(self, key_id: str) -> None:
        self.invalidated.append(key_id)

    def clear(self) -> None:
        self.invalidated.append("*")


class Plane:
    def __init__(self, store, settings: ClusterSettings | None = None, models=("llama", "qwen")):
        self.store = store
        self.settings = SimpleNamespace(current=settings or ClusterSettings())
        self.cfg = ServerConfig()  # data_dir: where sign-in's master key would be; these pages read none
        self.keys = Keys()
        self.router = SimpleNamespace(registry=SimpleNamespace(models={m: None for m in models}), events=Events())


def with_address(address: str) -> ClusterSettings:
    settings = ClusterSettings()
    return replace(settings, portal=replace(settings.portal, address=address))


def app(plane: Plane) -> web.Application:
    application = web.Application()
    mount(application, plane)
    application[CLOCK] = lambda: NOW
    return application


async def seed(store) -> SimpleNamespace:
    """Ada in Acme/eng/web, Bob in Other/ops/infra; Acme/eng/api is nobody's."""
    accounts = Accounts(store)
    paths = {p: await store.ensure_project(*p.split("/")) for p in ("Acme/eng/web", "Acme/eng/api", "Other/ops/infra")}
    ada, _ = await accounts.people.add(ROOT, email="ada@example.com", name="Ada", password=PASSWORD,
                                       member_of=["project:Acme/eng/web"])
    bob, _ = await accounts.people.add(ROOT, email="bob@example.com", name="Bob", password=PASSWORD,
                                       member_of=["project:Other/ops/infra"])
    return SimpleNamespace(accounts=accounts, paths=paths, ada=ada, bob=bob)


async def sign_in(client, email: str) -> str:
    """Signs in; returns the session's CSRF value, which the member pages' forms carry."""
    page = await (await client.get("/signin")).text()
    pre = re.search(r'name="_csrf" value="([^"]+)"', page).group(1)
    signed = await client.post("/signin", data={"_csrf": pre, "email": email, "password": PASSWORD},
                               allow_redirects=False)
    assert signed.status == 303, await signed.text()
    return csrf_of(await (await client.get("/keys")).text())


def csrf_of(page: str) -> str:
    return re.search(r'name="_csrf" value="([^"]+)"', page).group(1)


class Text(html.parser.HTMLParser):
    """A page's text as a reader sees it (tags dropped, entities read), and the text of each element by id."""

    def __init__(self, page: str):
        super().__init__()
        self.parts: list[str] = []
        self.by_id: dict[str, str] = {}
        self.urls: list[str] = []
        self._open: list[tuple[str, str | None, int]] = []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self._open.append((tag, attrs.get("id"), len(self.parts)))
        self.urls += [v for k, v in attrs.items() if k in ("href", "action", "src") and v]

    def handle_endtag(self, tag):
        while self._open:
            name, ident, start = self._open.pop()
            if ident:
                self.by_id[ident] = "".join(self.parts[start:])
            if name == tag:
                break

    def handle_data(self, data):
        self.parts.append(data)

    @property
    def text(self) -> str:
        return " ".join(" ".join(self.parts).split())
