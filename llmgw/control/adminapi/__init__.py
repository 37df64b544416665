"""The admin API (127.0.0.1:9090, /api/v1/*): what `llmgw ctl` and `llmgw keys` call.

Every route sits behind the admin token (the file only root and the llmgw
user can read); the middleware refuses anything without it before a
handler runs, so a route added later cannot be left open by mistake.
Answers are JSON; a refusal is {"error": {"message", "code"}} with the
status that fits it.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from llmgw import __version__
from llmgw.account import CLUSTER, TOKEN_PREFIX, AccountError, Actor, LimitError, Scope, parse_money
from llmgw.config import Duration
from llmgw.control.settings import SettingsError, validated_change
from llmgw.control.token import DEFAULT_HOLDER
from llmgw.control.versions import machines
from llmgw.store import StoreError, redact_url

if TYPE_CHECKING:
    from llmgw.control.plane import ControlPlane

# Typed by annotation only: ControlPlane imports this module, so it is not here at run time.
PLANE: web.AppKey[ControlPlane] = web.AppKey("plane")
AUTHENTICATED = "llmgw.authenticated"  # the request's key for who authenticated (see guard)
SCOPE = "llmgw.scope"  # the request's key for what the caller may reach (llmgw.account.scope)
# What a tenant administrator's token may call (issue 31, docs/people.md): people, keys, limits, the tree,
# usage and the audit log, each handler passing the caller's scope to its service. Every other route is a
# cluster administrator's, refused here before its handler runs, so a route added later is closed to tenants
# until it is listed.
TENANT_ROUTES = frozenset({
    ("GET", "/api/v1/people"), ("POST", "/api/v1/people"), ("GET", "/api/v1/people/{ident}"),
    ("POST", "/api/v1/people/{ident}/role"), ("POST", "/api/v1/people/{ident}/suspend"),
    ("POST", "/api/v1/people/{ident}/reset-password"), ("POST", "/api/v1/people/{ident}/memberships"),
    ("POST", "/api/v1/people/{ident}/administer"),
    ("GET", "/api/v1/keys"), ("POST", "/api/v1/keys"), ("GET", "/api/v1/keys/{key_id}"),
    ("POST", "/api/v1/keys/{key_id}/revoke"),
    ("GET", "/api/v1/limits"), ("PUT", "/api/v1/limits"),
    ("GET", "/api/v1/tree"), ("POST", "/api/v1/tree"),
    ("GET", "/api/v1/usage"), ("GET", "/api/v1/usage/export"),
    ("GET", "/api/v1/audit"),
    ("GET", "/api/v1/webhooks"), ("POST", "/api/v1/webhooks"), ("GET", "/api/v1/webhooks/deliveries"),
    ("DELETE", "/api/v1/webhooks/{hook_id}"), ("POST", "/api/v1/webhooks/{hook_id}/test"),
})
# What a claimed name may hold: a login's characters; anything else is shown as "?".
_CLAIM = re.compile(r"[^A-Za-z0-9._@+-]")
MAX_BODY = 1024 * 1024
# The admin API's own clients on this machine, by their X-Llmgw-Via marker, as the audit log names them.
_CLIENTS = {"cli": "llmgw ctl", "console": "the console"}


class Refused(Exception):
    def __init__(self, status: int, message: str, code: str):
        super().__init__(message)
        self.status, self.code = status, code


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json")


def _error(status: int, message: str, code: str) -> web.Response:
    return _json({"error": {"message": message, "code": code}}, status)


@web.middleware
async def guard(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                ) -> web.StreamResponse:
    plane: ControlPlane = request.app[PLANE]
    given = request.headers.get("Authorization", "")
    token = given[7:] if given[:7].lower() == "bearer " else ""
    try:
        if token and hmac.compare_digest(token.encode(), plane.admin_token.secret.encode()):
            # Who authenticated, for the audit log; actor() below adds what llmgw ctl claims.
            request[AUTHENTICATED], request[SCOPE] = plane.admin_token.holder, CLUSTER
        elif token.startswith(TOKEN_PREFIX):
            found = await plane.accounts.tokens.authenticate(token)
            if found is None:
                return _error(401, "that token is unknown or revoked, or its person is suspended or administers "
                                   "nothing; make a new one on your profile page", "unauthorized")
            request[AUTHENTICATED], request[SCOPE] = found[0].email, found[1]
            route = _route(request)
            # A path with no route (or not this method) goes on to be answered 404 or 405 as the admin token's is:
            # "for a cluster administrator" would have named a route that does not exist.
            if found[1].tenant and route[1] and route not in TENANT_ROUTES:
                return _error(403, "this is for a cluster administrator; your token reaches the people, keys, "
                                   "limits, usage, audit log and webhooks of " + ", ".join(found[1].places),
                              "forbidden")
        else:
            return _error(401, "the admin API needs the admin token (Authorization: Bearer …); "
                               "llmgw ctl reads it from the admin-token file", "unauthorized")
        return await handler(request)
    except Refused as e:
        return _error(e.status, str(e), e.code)
    except (AccountError, SettingsError) as e:
        return _error(e.status, str(e), e.code)
    except StoreError as e:
        return _error(503, str(e), "store_unavailable")
    except web.HTTPException as e:
        if e.status == 413:
            return _error(413, f"the body is larger than {MAX_BODY // 1024} KiB", "too_large")
        if e.status in (404, 405):
            return _error(e.status, f"there is no {request.method} {request.path} in the admin API",
                          "not_found")
        raise


def _route(request: web.Request) -> tuple[str, str]:
    """(method, the route's pattern): what TENANT_ROUTES lists."""
    resource = request.match_info.route.resource
    return request.method, resource.canonical if resource is not None else ""


def within(request: web.Request) -> Scope:
    """What the caller may reach: everything with the admin token, a tenant's places with theirs."""
    scope: Scope = request.get(SCOPE, CLUSTER)
    return scope


def actor(request: web.Request) -> Actor:
    """Who acted, for the audit log: who authenticated, never who a header says.

    The headers X-Llmgw-Actor and X-Llmgw-Via are anyone's to write; they
    were written into the audit log as they came (issue 10). Now the actor is
    the token's holder, and `llmgw ctl`'s (or the console's) claim of the
    login that ran it is added only from this machine (loopback) with its
    marker, and only as a claim: "admin (claimed: ada via llmgw ctl)",
    "admin (claimed: ada via the console)".
    """
    who = request.get(AUTHENTICATED) or DEFAULT_HOLDER
    claimed = request.headers.get("X-Llmgw-Actor", "").strip()
    via = request.headers.get("X-Llmgw-Via", "")
    if claimed and via in _CLIENTS and _loopback(request.remote):
        return Actor(f"{who} (claimed: {_CLAIM.sub('?', claimed[:64])} via {_CLIENTS[via]})", via)
    return Actor(who, "api")


def _loopback(remote: str | None) -> bool:
    try:
        return remote is not None and ipaddress.ip_address(remote.split("%")[0]).is_loopback
    except ValueError:
        return False


async def body(request: web.Request) -> dict[str, Any]:
    try:
        raw = await request.read()
    except RequestPayloadError:
        # aiohttp could not inflate it (Content-Encoding: gzip over bytes that are not): a 500 until the fuzz found it.
        raise Refused(400, "the body says it is compressed but does not inflate; send it as it is, without "
                           "Content-Encoding", "invalid_json") from None
    try:
        data = orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError as e:
        raise Refused(400, f"the body is not JSON: {e}", "invalid_json") from None
    if not isinstance(data, dict):
        raise Refused(400, "the body must be a JSON object", "invalid_json")
    return data


_T = TypeVar("_T")


# A field of a body, typed here: past this point a handler holds what `kind` says, not JSON.
@overload
def _field(data: dict[str, Any], name: str, kind: type[_T], required: Literal[True]) -> _T: ...
@overload
def _field(data: dict[str, Any], name: str, kind: type[_T], required: bool = False) -> _T | None: ...
@overload
def _field(data: dict[str, Any], name: str, kind: tuple[type[_T], ...], required: bool = False) -> _T | None: ...
def _field(data: dict[str, Any], name: str, kind: type[_T] | tuple[type[_T], ...], required: bool = False
           ) -> _T | None:
    value = data.get(name)
    if value is None:
        if required:
            raise Refused(400, f'"{name}" is required', "invalid_request")
        return None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise Refused(400, f'"{name}" has the wrong type', "invalid_request")
    return value


# status

async def status(request: web.Request) -> web.Response:
    return _json(await status_of(request.app[PLANE]))


async def status_of(plane: ControlPlane) -> dict[str, Any]:
    """What `llmgw ctl status` shows: this control plane, the leader, the store, the machines, the plugins.

    A function of the plane rather than of a request, so that the cluster's
    own MCP tools (llmgw.mcp.cluster) say what the admin API says. Read from
    the store and this process, so a standby answers it as the leader does.
    """
    lease = plane.lease.state.lease
    now = time.time()
    leader = None
    if lease is not None and lease.expires_at > now:
        leader = {"holder": lease.holder, "address": lease.address, "epoch": lease.epoch,
                  "expires_in": round(lease.expires_at - now, 1)}
    try:
        schema = await plane.store.schema_version()
        store_up = True
    except StoreError:
        schema, store_up = None, False
    try:
        # The lease's holder is NAME#INSTANCE; the control planes are listed by NAME.
        cluster = await machines(plane.store, lease.holder.rsplit("#", 1)[0] if leader and lease else "")
    except StoreError:
        cluster = {"control_planes": [], "nodes": []}
    return {
        "name": plane.name,
        "version": __version__,
        "holder": plane.holder,
        "role": "leader" if plane.lease.leading else "standby",
        "leader": leader,
        "store": {"kind": "sqlite" if plane.store.url.startswith("sqlite:") else "postgresql",
                  "address": redact_url(plane.store.url), "up": store_up, "schema": schema},
        "settings_version": plane.settings.version,
        "listen": plane.listen_addresses,
        "agents": {"address": plane.trust.agent_address, "ca_fingerprint": plane.trust.ca_fingerprint,
                   "taking": plane.trust.ssl_context is not None, "problem": plane.trust.problem},
        "uptime_s": round(time.monotonic() - plane.started, 1),
        "machines": cluster,
        # llmgw's own included: they come through the same seam, and a script sees what a name is provided by.
        "plugins": plane.plugins.as_list(builtin=True),
        "control_planes": await _control_planes(plane, leader),
        "traffic": _traffic(plane),
    }


async def _control_planes(plane: ControlPlane, leader: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every control plane the store knows, as each wrote itself at its last start, and which one leads.

    The console's overview shows them; the store's list, not this process's,
    so a standby that is down still has its row (with when it last started).
    """
    leading = leader["holder"].rsplit("#", 1)[0] if leader else None
    try:
        known = await plane.store.list_control_planes()
    except StoreError:
        known = []
    rows = {cp.name: {"name": cp.name, "agent_address": cp.agent_address, "started_at": cp.updated_at,
                      "leads": cp.name == leading} for cp in known}
    rows.setdefault(plane.name, {"name": plane.name, "agent_address": plane.trust.agent_address,
                                 "started_at": None, "leads": plane.name == leading})
    return sorted(rows.values(), key=lambda r: r["name"])


def _traffic(plane: ControlPlane) -> dict[str, float]:
    """Client API requests answered since this process started, and how many of them failed (a 5xx).

    Counts, not rates: a caller that samples twice divides by the time
    between (the console does, every 3 s). Read from the same counters
    /metrics shows, so the two never disagree.
    """
    requests = errors = 0.0
    for metric in plane.registry.collect():
        if metric.name != "llmgw_requests":
            continue
        for sample in metric.samples:
            if sample.name != "llmgw_requests_total":
                continue
            requests += sample.value
            if str(sample.labels.get("status", "")).startswith("5"):
                errors += sample.value
    return {"requests": requests, "errors": errors}


# cluster settings

async def config_get(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    version, value = await plane.settings.get(request.query.get("path"))
    return _json({"version": version, "value": value})


async def config_change(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    data = await body(request)
    who = actor(request)
    set_ = _field(data, "set", dict) or {}
    if not all(isinstance(v, str) for v in set_.values()):
        raise Refused(400, '"set" maps dotted paths to values written as text', "invalid_request")
    version, doc = await validated_change(
        plane.settings, plane.cfg, who, set_=set_, unset=_field(data, "unset", list),
        whole=_field(data, "settings", dict), expected_version=_field(data, "expected_version", int))
    return _json({"version": version, "value": doc})


# audit

async def audit(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    try:
        limit = min(int(request.query.get("limit", "100")), 10_000)
        since = float(request.query["since"]) if "since" in request.query else None
    except ValueError:
        raise Refused(400, "limit and since must be numbers", "invalid_request") from None
    entries = await plane.accounts.audit_log(within(request), limit=limit, since=since,
                                             target=request.query.get("target"))
    return _json([
        {"id": e.id, "at": e.at, "actor": e.actor, "via": e.via, "action": e.action,
         "target": e.target, "before": e.before, "after": e.after}
        for e in entries
    ])


# keys

async def keys_create(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    data = await body(request)
    ttl_text = _field(data, "ttl", str)
    try:
        ttl = float(Duration.parse(ttl_text)) if ttl_text else None
    except ValueError as e:
        raise Refused(400, f"--ttl: {e}", "invalid_request") from None
    view, secret = await plane.accounts.create_key(
        actor(request), name=_field(data, "name", str, True), project=_field(data, "project", str, True),
        ttl=ttl, band=_field(data, "band", str), person_email=_field(data, "person", str),
        max_key_ttl=float(plane.settings.current.auth.max_key_ttl), create=bool(_field(data, "create", bool)),
        within=within(request))
    return _json({**view, "key": secret}, 201)


async def keys_list(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    return _json(await plane.accounts.list_keys(request.query.get("project"), within(request)))


async def keys_show(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    return _json(await plane.accounts.key(request.match_info["key_id"], within(request)))


async def keys_revoke(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    view = await plane.accounts.revoke_key(actor(request), request.match_info["key_id"], within(request))
    plane.keys.invalidate(view["id"])
    return _json(view)


# limits

async def limits_get(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    scope, ident = request.query.get("scope", ""), request.query.get("id", "")
    return _json(await plane.accounts.limits(scope, ident, within(request)))


async def limits_put(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    data = await body(request)
    scope = _field(data, "scope", str, True)
    ident = _field(data, "id", str, True)
    given = _field(data, "limits", dict) or {}
    changes: dict[str, Any] = {}
    for name in ("rpm", "tpm"):
        if name in given:
            changes[name] = given[name]
    if "budget" in given:
        try:
            changes["budget_micros"] = None if given["budget"] is None else parse_money(str(given["budget"]))
        except LimitError as e:
            raise Refused(400, f"--budget: {e}", "invalid_request") from None
    for name in ("period", "models", "tools"):
        if name in given:
            changes[name] = given[name]
    if "expires" in given:
        try:
            changes["expires_at"] = None if given["expires"] is None else time.time() + float(
                Duration.parse(str(given["expires"])))
        except ValueError as e:
            raise Refused(400, f"--expires: {e}", "invalid_request") from None
    unknown = sorted(set(given) - {"rpm", "tpm", "budget", "period", "models", "expires", "tools"})
    if unknown:
        raise Refused(400, f"unknown limit {', '.join(unknown)}", "invalid_request")
    result = await plane.accounts.set_limits(actor(request), scope, ident, changes,
                                             replace_all=bool(data.get("replace")), within=within(request))
    # Limits feed every cached key's chain; a change must be in force at once here.
    plane.keys.clear()
    return _json(result)


def make_admin_app(plane: ControlPlane) -> web.Application:
    app = web.Application(middlewares=[guard], client_max_size=MAX_BODY)
    app[PLANE] = plane
    r = app.router
    r.add_get("/api/v1/status", status)
    r.add_get("/api/v1/config", config_get)
    r.add_post("/api/v1/config", config_change)
    r.add_get("/api/v1/audit", audit)
    r.add_post("/api/v1/keys", keys_create)
    r.add_get("/api/v1/keys", keys_list)
    r.add_get("/api/v1/keys/{key_id}", keys_show)
    r.add_post("/api/v1/keys/{key_id}/revoke", keys_revoke)
    r.add_get("/api/v1/limits", limits_get)
    r.add_put("/api/v1/limits", limits_put)
    from llmgw.control.adminapi import cache, usage  # here: they import this module's helpers
    usage.register(r)
    cache.register(r)
    from llmgw.control.adminapi import join

    join.register(r)
    from llmgw.control.adminapi import models

    models.register(r)
    from llmgw.control.adminapi import fabric, logs

    logs.register(r)
    fabric.register(r)
    from llmgw.control.adminapi import people, tree

    people.register(r)
    tree.register(r)
    from llmgw.control.adminapi import auth

    auth.register(r)
    from llmgw.control.adminapi import upgrade

    upgrade.register(r)
    from llmgw.control.adminapi import webhooks

    webhooks.register(r)
    from llmgw.control.adminapi import judges, kb

    kb.register(r)
    judges.register(r)
    # Routes from a floor above (the MCP servers', llmgw.mcp): behind the same token middleware.
    extend_admin = getattr(getattr(plane, "extend", None), "admin", None)
    if extend_admin is not None:
        extend_admin(app, plane)
    return app
