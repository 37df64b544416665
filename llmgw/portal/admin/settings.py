"""/admin/settings: the cluster's settings, changed through validated_change as `llmgw ctl config set` is.

The form carries the version it was read at (expected_version), so a change
saved by someone else meanwhile refuses this one with a sentence rather than
being overwritten. Refusals are shown in the reader's language, naming the key.
"""

from __future__ import annotations

from typing import Any, TypedDict

import yaml
from aiohttp import web
from multidict import MultiDictProxy

from llmgw.config import parse_yaml
from llmgw.control import SettingsError, validated_change
from llmgw.errors import N_
from llmgw.portal import i18n
from llmgw.portal.web import LANG, PORTAL, Viewer, form, page, redirect, render


class _Kept(TypedDict):
    """The form as typed: shown again when the change is refused."""

    path: str
    value: str
    document: str | None  # the whole settings' YAML, when that form was sent


class _Change(TypedDict, total=False):
    """validated_change's arguments: one of the three."""

    set_: dict[str, str]
    unset: list[str]
    whole: dict[str, Any]  # YAML as an administrator typed it: validated_change checks it


@page("/admin/settings", methods=("GET", "POST"), role="admin")
async def settings(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    portal = request.app[PORTAL]
    lang = request[LANG]
    watcher, cfg = portal.plane.settings, portal.plane.cfg
    error, status, kept = None, 200, _Kept(path="", value="", document=None)
    if request.method == "POST":
        posted = await form(request)
        kept = _Kept(path=posted.get("path", "").strip(), value=posted.get("value", ""),
                     document=posted.get("document"))
        version_text = posted.get("expected_version", "")
        expected = int(version_text) if version_text.isdigit() else None
        try:
            change = _change(posted, kept)
            version, _ = await validated_change(watcher, cfg, viewer.actor(), expected_version=expected, **change)
        except SettingsError as e:
            error = f"{e.key}: {i18n.say(lang, e)}" if e.key else i18n.say(lang, e)
            status = e.status if 400 <= e.status < 500 else 400
        else:
            said = i18n.gettext(lang, N_("The settings were saved; version {version} is in force.")).format(
                version=version)
            return redirect(request, "/admin/settings", notice=said)
    version, doc = await watcher.document()
    # A refused edit keeps the text typed, to fix; a stale one shows the settings as they now are, since
    # sending the old text again on the new version would undo the other person's change unseen.
    keep = error is not None and status != 409 and kept["document"] is not None
    document = kept["document"] if keep else _yaml(doc)
    return render(request, "admin/settings.html", status=status, title=N_("Settings"),
                  version=version, document=document, path=kept["path"], value=kept["value"], error=error)


def _change(posted: MultiDictProxy[str], kept: _Kept) -> _Change:
    """The form as validated_change's arguments: one key set or unset, or the whole document."""
    if kept["document"] is not None:
        try:
            whole = parse_yaml(kept["document"])
        except yaml.YAMLError as e:
            raise SettingsError(N_("the settings are not YAML: {problem}"),
                                params={"problem": getattr(e, "problem", None) or str(e)}) from None
        if not isinstance(whole, dict):
            raise SettingsError(N_("the settings are a mapping of keys, such as auth: with cache_ttl: under it"))
        return {"whole": whole}
    if not kept["path"]:
        raise SettingsError(N_("say which key to change, such as auth.cache_ttl"))
    if posted.get("unset") == "1":
        return {"unset": [kept["path"]]}
    return {"set_": {kept["path"]: kept["value"]}}


def _yaml(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, default_flow_style=False)
