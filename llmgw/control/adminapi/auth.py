"""Sign-in from the directory in the admin API: what `llmgw ctl auth` calls (docs/sign-in.md).

    GET    /api/v1/auth                  how people get in: each way on or off, kept secrets, the last sync
    POST   /api/v1/auth/test/{kind}      try oidc|ldap: {settings?: the block to try, login?, redirect_url?}
    PUT    /api/v1/auth/{kind}           try a block and keep it only if every step passed
    DELETE /api/v1/auth/{kind}           turn oidc|ldap|scim off (its accounts stay)
    PUT    /api/v1/auth/secrets/{name}   {value}: seal a secret in the store as store:auth/NAME
    DELETE /api/v1/auth/secrets/{name}
    POST   /api/v1/auth/scim-token       a new SCIM bearer token, shown once
    POST   /api/v1/auth/ldap/sync        read the directory now, as the leader's sync does

Every one goes through llmgw.control.signin.SignInSetup, as /admin/sign-in does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from llmgw.auth import SecretError
from llmgw.control.adminapi import PLANE, Refused, _field, _json, actor, body
from llmgw.control.signin import SignInSetup

if TYPE_CHECKING:
    from llmgw.control.plane import ControlPlane


def _setup(request: web.Request) -> SignInSetup:
    plane: ControlPlane = request.app[PLANE]
    return SignInSetup(plane.store, plane.settings, plane.cfg)


def _refused(e: SecretError) -> Refused:
    return Refused(400, str(e), "secret_refused")


async def auth_get(request: web.Request) -> web.Response:
    return _json(await _setup(request).status())


def _block(data: dict[str, Any]) -> dict[str, Any] | None:
    return _field(data, "settings", dict)


async def auth_test(request: web.Request) -> web.Response:
    data = await body(request)
    login = _field(data, "login", str) or ""
    try:
        trial = await _setup(request).trial(request.match_info["kind"], _block(data), login=login,
                                            redirect_url=_field(data, "redirect_url", str) or "")
    except SecretError as e:
        raise _refused(e) from None
    return _json(trial.view())


async def auth_keep(request: web.Request) -> web.Response:
    data = await body(request)
    block = _block(data)
    if block is None:
        raise Refused(400, '"settings" is required: the block to try and keep, as under auth.KIND', "invalid_request")
    try:
        trial, version = await _setup(request).keep(
            request.match_info["kind"], block, actor(request), login=_field(data, "login", str) or "",
            redirect_url=_field(data, "redirect_url", str) or "",
            expected_version=_field(data, "expected_version", int))
    except SecretError as e:
        raise _refused(e) from None
    if version is None:
        # 422: the block is well formed, and what it points at did not answer as it must; nothing was written.
        return _json({"kept": False, "trial": trial.view(),
                      "error": {"message": "the trial failed, so nothing was kept; see the step that failed",
                                "code": "trial_failed"}}, 422)
    return _json({"kept": True, "version": version, "trial": trial.view()})


async def auth_off(request: web.Request) -> web.Response:
    version = await _setup(request).turn_off(request.match_info["kind"], actor(request))
    return _json({"version": version})


async def secret_put(request: web.Request) -> web.Response:
    data = await body(request)
    value = _field(data, "value", str, True)
    try:
        ref = await _setup(request).put_secret(request.match_info["name"], value, actor(request))
    except SecretError as e:
        raise _refused(e) from None
    return _json({"ref": ref})


async def secret_delete(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    try:
        gone = await _setup(request).delete_secret(name, actor(request))
    except SecretError as e:
        raise _refused(e) from None
    if not gone:
        raise Refused(404, f"there is no secret store:auth/{name}", "not_found")
    return _json({"removed": name})


async def scim_token(request: web.Request) -> web.Response:
    return _json({"token": await _setup(request).make_scim_token(actor(request))}, 201)


async def ldap_sync(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    if not plane.settings.current.auth.ldap.enabled:
        raise Refused(409, "auth.ldap is not set up, so there is no directory to read", "not_configured")
    try:
        report = await plane.ldap_sync.run_once(actor(request))
    except SecretError as e:
        raise _refused(e) from None
    return _json(report)


def register(r: web.UrlDispatcher) -> None:
    r.add_get("/api/v1/auth", auth_get)
    r.add_post("/api/v1/auth/test/{kind}", auth_test)
    r.add_put("/api/v1/auth/secrets/{name}", secret_put)
    r.add_delete("/api/v1/auth/secrets/{name}", secret_delete)
    r.add_post("/api/v1/auth/scim-token", scim_token)
    r.add_post("/api/v1/auth/ldap/sync", ldap_sync)
    r.add_put("/api/v1/auth/{kind}", auth_keep)
    r.add_delete("/api/v1/auth/{kind}", auth_off)
