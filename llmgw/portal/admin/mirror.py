"""/admin/mirror: the model mirrors and every file on them, as this control plane last read them.

The page shows MirrorKeeper.view() (llmgw.control.mirrors), the same document GET /api/v1/mirrors answers, read
every `mirror.read_every` by the control plane itself; the page reads no mirror and changes nothing. What a mirror
keeps follows the catalog (the leader tells it the pins) and `llmgw mirror` on its machine (docs/mirror.md).

A worker process (router.workers) keeps no keeper, since the mirrors are read once a control plane, by its main
process: there the page says so rather than show an empty list as if nothing were held.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from llmgw.errors import N_
from llmgw.portal import i18n
from llmgw.portal.web import LANG, PORTAL, Viewer, add_nav, page, render

add_nav("admin", "/admin/mirror", N_("Model mirror"), "admin")

TITLE = N_("Model mirror")
# A file's state on one mirror (llmgw.mirror.service.Mirror.listing), as a person reads it.
STATES = {"held": N_("held"), "waiting": N_("waiting to be fetched"), "fetching": N_("fetching"),
          "checking": N_("checking its sha256"), "failed": N_("failed")}
# Hugging Face's verdicts on a file; the ones a person should stop at are shown as a warning.
SCANS = {"safe": N_("safe"), "unsafe": N_("unsafe"), "suspicious": N_("suspicious"), "caution": N_("caution"),
         "unscanned": N_("not scanned"), "queued": N_("scan queued"), "error": N_("scan failed")}
FLAGGED = frozenset({"unsafe", "suspicious"})


def size_words(lang: str, n: int) -> str:
    """A file's size the way `llmgw mirror list` prints it (1000s: what the disk's maker and Hugging Face say)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{i18n.number(lang, round(n / scale, 1))} {unit}"
    return i18n.gettext(lang, N_("{count} bytes")).format(count=i18n.number(lang, n))


def _keeper_view(request: web.Request) -> dict[str, Any] | None:
    # ControlPlane.cluster.mirrors; a worker process has no cluster (see the module's docstring).
    cluster = getattr(request.app[PORTAL].plane, "cluster", None)
    keeper = getattr(cluster, "mirrors", None)
    return None if keeper is None else keeper.view()


def _mirrors(addresses: list[str], seen: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Each mirror the settings name, in their order, as last read: one named since the last read is "not read yet"
    rather than missing from the page."""
    known = {m["url"]: m for m in seen}
    unread = {"ok": None, "at": 0.0, "since": 0.0, "error": "", "held": 0}
    named = [known.get(url) or {"url": url, **unread} for url in addresses]
    return named + [m for m in seen if m["url"] not in addresses]


@page("/admin/mirror", role="admin")
async def mirror(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    addresses = request.app[PORTAL].plane.settings.current.mirror.addresses
    view = _keeper_view(request) if addresses else None
    mirrors = _mirrors(addresses, view["mirrors"]) if view is not None else []
    files = view["files"] if view is not None else []
    busy = any(on.get("state") in ("waiting", "fetching", "checking")
               for f in files for on in f.get("mirrors", {}).values())
    lang = request[LANG]
    return render(request, "admin/mirror.html", title=TITLE, addresses=addresses, read_here=view is not None,
                  mirrors=mirrors, files=files, busy=busy, states=STATES, scans=SCANS, flagged=FLAGGED,
                  size=lambda n: size_words(lang, int(n or 0)))
