"""SCIM's routes and the portal mounted in process over a real store, served on loopback (for tests/auth/test_scim*)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from aiohttp import web

from llmgw.account import KeyCache
from llmgw.auth.scim import make_token, mount
from llmgw.config import ClusterSettings, ServerConfig
from llmgw.config.auth import SCIMSettings
from llmgw.events import Events
from llmgw.portal import mount as mount_portal
from llmgw.portal import registered

SCIM = "application/scim+json"


def settings_with(scim: SCIMSettings) -> ClusterSettings:
    base = ClusterSettings()
    return replace(base, auth=replace(base.auth, scim=scim))


class Plane:
    """What SCIM and the portal read of the process serving them; `settings.current` may be replaced."""

    def __init__(self, store, scim: SCIMSettings, data_dir: str):
        self.store = store
        self.settings = SimpleNamespace(current=settings_with(scim))
        self.cfg = replace(ServerConfig(), data_dir=data_dir)
        self.keys = KeyCache(store, ttl=lambda: 3600.0)  # an hour: only SCIM's clear() explains a refusal
        self.router = SimpleNamespace(events=Events())  # the portal tells a revoked key's event to it


def scim_app(plane: Plane) -> web.Application:
    """SCIM before the portal, as make_client_app puts them."""
    app = web.Application()
    mount(app, plane)
    mount_portal(app, plane, registry=registered())
    return app


async def bearer(store) -> dict[str, str]:
    return {"Authorization": f"Bearer {await make_token(store)}", "Content-Type": SCIM}
