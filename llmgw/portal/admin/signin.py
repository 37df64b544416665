"""/admin/sign-in: how people get in (passwords, OIDC, LDAP/AD, SCIM), each block tried before it is kept.

The page calls llmgw.control.signin.SignInSetup, as `llmgw ctl auth` does
through the admin API: the same status, the same trial steps, the same rule
that a block is written only after every step passed.
"""

from __future__ import annotations

from typing import Any

import yaml
from aiohttp import web

from llmgw.auth import NO_ADDRESS, SecretError
from llmgw.config import parse_yaml, to_dict
from llmgw.control import KINDS, SettingsError, SignInSetup
from llmgw.errors import N_
from llmgw.portal import i18n
from llmgw.portal.web import LANG, PORTAL, Viewer, add_nav, form, page, redirect, render

add_nav("admin", "/admin/sign-in", N_("Sign-in"), "admin")


def _setup(request: web.Request) -> SignInSetup:
    plane = request.app[PORTAL].plane
    return SignInSetup(plane.store, plane.settings, plane.cfg)


def _yaml(block: object) -> str:  # one of auth's settings dataclasses
    return yaml.safe_dump(to_dict(block), sort_keys=False, allow_unicode=True, default_flow_style=False)


@page("/admin/sign-in", methods=("GET", "POST"), role="admin")
async def signin_setup(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    setup = _setup(request)
    lang = request[LANG]
    auth = request.app[PORTAL].plane.settings.current.auth
    blocks = {kind: _yaml(getattr(auth, kind)) for kind in KINDS}
    logins = {kind: "" for kind in KINDS}
    trials: dict[str, dict[str, Any]] = {}  # each kind's Trial.view()
    errors: dict[str, str] = {}
    made_token = None
    status = 200
    if request.method == "POST":
        posted = await form(request)
        action = posted.get("action", "")
        kind = posted.get("kind", "")
        try:
            if action in ("try", "keep") and kind in KINDS:
                blocks[kind] = posted.get("block", "")
                logins[kind] = posted.get("login", "").strip()
                given = _parsed(blocks[kind])
                if action == "try":
                    trials[kind] = (await setup.trial(kind, given, login=logins[kind])).view()
                else:
                    trial, version = await setup.keep(kind, given, viewer.actor(), login=logins[kind])
                    if version is not None:
                        said = i18n.gettext(lang, N_("Every step passed, and the block is kept; settings version "
                                                     "{version} is in force.")).format(version=version)
                        return redirect(request, "/admin/sign-in", notice=said)
                    trials[kind] = trial.view()
                    errors[kind] = i18n.gettext(lang, N_("A step failed, so nothing was kept."))
                    status = 422
            elif action == "secret":
                ref = await setup.put_secret(posted.get("name", "").strip(), posted.get("value", ""), viewer.actor())
                said = i18n.gettext(lang, N_("The secret is sealed in the store; name it in the settings as "
                                             "{ref}.")).format(ref=ref)
                return redirect(request, "/admin/sign-in", notice=said)
            elif action == "scim-token":
                made_token = await setup.make_scim_token(viewer.actor())
            else:
                return redirect(request, "/admin/sign-in")
        except SettingsError as e:
            errors[kind or action] = f"{e.key}: {i18n.say(lang, e)}" if e.key else i18n.say(lang, e)
            status = e.status if 400 <= e.status < 500 else 400
        except SecretError as e:
            errors[kind or action] = i18n.say(lang, e)
            status = 400
    return render(request, "admin/signin.html", status=status, title=N_("Sign-in"), state=await setup.status(),
                  blocks=blocks, logins=logins, trials=trials, errors=errors, made_token=made_token,
                  no_address=NO_ADDRESS)


def _parsed(text: str) -> dict[str, Any]:
    """The block as typed, YAML from the administrator: SignInSetup checks its fields."""
    try:
        block = parse_yaml(text)
    except yaml.YAMLError as e:
        raise SettingsError(N_("the block is not YAML: {problem}"),
                            params={"problem": getattr(e, "problem", None) or str(e)}) from None
    if not isinstance(block, dict):
        raise SettingsError(N_("the block is a mapping of keys, such as urls: and base_dn: for a directory"))
    return block
