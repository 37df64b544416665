"""The portal in process over a real store, with single sign-on pointed at a real OpenID provider."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlsplit

import aiohttp
from aiohttp.test_utils import TestServer

from llmgw.config import ClusterSettings, ServerConfig
from llmgw.config.auth import OIDCSettings
from llmgw.trust import ensure_master_key
from llmgw.trust.masterkey import FILE_NAME
from tests.portal.portalkit import Plane, portal_app
from tests.support.oidcprovider import CLIENT_ID, CLIENT_SECRET
from tests.support.pgcluster import free_port

GROUPS = {"roles": {"admin": ["llmgw-admins"]}, "memberships": {"ml-engineers": "team:Acme/ml"}}


def secret_file(root: Path, value: str = CLIENT_SECRET) -> str:
    path = root / "oidc-client-secret"
    path.write_text(value + "\n")
    os.chmod(path, 0o600)
    return str(path)


def oidc_settings(issuer: str, root: Path, **kw) -> OIDCSettings:
    base = dict(issuer=issuer, client_id=CLIENT_ID, client_secret_file=secret_file(root),
                scopes=["openid", "email", "profile", "groups"], label="Corp", **GROUPS)
    return OIDCSettings(**(base | kw))


def cluster(oidc: OIDCSettings, **auth) -> ClusterSettings:
    settings = ClusterSettings()
    return replace(settings, auth=replace(settings.auth, oidc=oidc, **auth))


class Gateway:
    """The portal on a loopback port of its own, so the provider can be told its callback before it starts."""

    def __init__(self, store, root: Path):
        self.store = store
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.callback = self.url + "/login/oidc/callback"
        root.mkdir(parents=True, exist_ok=True)
        ensure_master_key(str(root / FILE_NAME))
        self.plane = Plane(store)
        self.plane.cfg = replace(ServerConfig(), data_dir=str(root))
        self.server: TestServer | None = None

    def use(self, settings: ClusterSettings, *, address: bool = True) -> None:
        """Put `settings` in force; with `address`, portal.address is this gateway's when they name none,
        as an installation's is (single sign-on does not start without one)."""
        if address and not settings.portal.address:
            settings = replace(settings, portal=replace(settings.portal, address=self.url))
        self.plane.settings.current = settings

    async def start(self) -> None:
        self.server = TestServer(portal_app(self.store, plane=self.plane), host="127.0.0.1", port=self.port)
        await self.server.start_server()

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()


def browser() -> aiohttp.ClientSession:
    # unsafe: the jar keeps cookies of an IP address (127.0.0.1), which both sides are here.
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def through_provider(session: aiohttp.ClientSession, gateway: Gateway, login: str, *,
                           start: str = "/login/oidc") -> aiohttp.ClientResponse:
    """Follow a sign-in as a browser would, logging in as `login` at the provider's page; the gateway's
    last answer (the callback's) is returned unfollowed."""
    url = gateway.url + start
    for _ in range(20):
        answer = await session.get(url, allow_redirects=False)
        if url.startswith(gateway.callback):
            return answer
        if answer.status in (302, 303):
            url = urljoin(url, answer.headers["Location"])
            continue
        page = await answer.text()
        form = re.search(r'<form[^>]*action="([^"]+)"', page)
        assert answer.status == 200 and form, f"{url} answered {answer.status}:\n{page[:2000]}"
        posted = await session.post(urljoin(url, form.group(1)), allow_redirects=False,
                                    data={"prompt": "login", "login": login, "password": "any"})
        assert posted.status in (302, 303), await posted.text()
        url = urljoin(url, posted.headers["Location"])
    raise AssertionError("the sign-in went round in circles")


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
