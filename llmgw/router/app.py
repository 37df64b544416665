"""The client listener (:8080): health, leadership, readiness and /v1.

/health says the process is up; /leader is 200 only on the leader, which
is what a load balancer in front of several control planes should check;
/ready is 200 only when a request would have somewhere to go.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from llmgw.account import CHAT_PREFIX, KEY_PREFIX, AccountError, Principal, key_flaw
from llmgw.auth import mount as mount_scim
from llmgw.router.appkeys import PLANE, PRINCIPAL, REQUEST_ID
from llmgw.router.batches import add_routes as add_batch_routes
from llmgw.router.call import new_request_id
from llmgw.router.clientaddr import client_address
from llmgw.router.connguard import ConnectionGuard
from llmgw.router.errors import api_error, in_anthropic_shape, speaks_anthropic
from llmgw.router.handlers import add_routes
from llmgw.router.knowledge import add_routes as add_kb_routes
from llmgw.router.media.jobs import add_routes as add_job_routes
from llmgw.router.passon import pass_on
from llmgw.router.plane import ClientPlane
from llmgw.store import StoreError

CONNECTIONS = web.AppKey("connections", ConnectionGuard)  # the listener's sites serve through it



def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json")


async def health(request: web.Request) -> web.Response:
    return _json({"status": "ok"})


async def leader(request: web.Request) -> web.Response:
    plane = request.app[PLANE]
    if plane.lease.leading:
        return _json({"leader": True, "name": plane.name})
    lease = plane.lease.state.lease
    current = lease.address if lease and lease.expires_at > time.time() else None
    return _json({"leader": False, "name": plane.name, "leader_address": current,
                  "message": f"this control plane stands by; the leader is {current or 'not known yet'}"},
                 status=503)


async def ready(request: web.Request) -> web.Response:
    """200 while some model has an endpoint a request could go to now. A model whose every
    endpoint is passed over by its breaker is listed as failing, not served: a load balancer
    sends nothing to a control plane whose models are all failing."""
    plane = request.app[PLANE]
    models = plane.router.registry.models
    failing = sorted(name for name, entry in models.items() if entry.failing())
    served = [name for name, entry in models.items() if entry.usable() and name not in failing]
    if not served:
        if failing:
            message = (f"every replica of {', '.join(failing)} is failing and passed over by its breaker; "
                       "no model can take a request now")
        else:
            message = "no model has an endpoint to send requests to yet"
        return _json({"ready": False, "message": message, "failing": failing}, status=503)
    return _json({"ready": True, "models": served, "failing": failing})


def _presented_key(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    if header[:7].lower() == "bearer ":
        return header[7:].strip()
    # Anthropic's SDK sends its key here.
    return request.headers.get("x-api-key")


@web.middleware
async def request_id(request: web.Request, handler: Handler) -> web.StreamResponse:
    ident = request[REQUEST_ID] = new_request_id()
    try:
        response = await handler(request)
    except web.HTTPException as e:
        if e.status == 413:
            response = api_error(413, "the request body is larger than this gateway takes (router.max_body)",
                                 "request_too_large")
        elif e.status == 405:
            response = api_error(405, f"{request.path} does not take {request.method}", "method_not_allowed")
        else:
            raise
    if speaks_anthropic(request.path):
        response = in_anthropic_shape(response)
    if not response.prepared:
        response.headers["x-request-id"] = ident
    return response


@web.middleware
async def standby(request: web.Request, handler: Handler) -> web.StreamResponse:
    """On a standby that does not answer itself, /v1 goes to the leader (router/passon.py)."""
    if not request.path.startswith("/v1"):
        return await handler(request)
    plane = request.app[PLANE]
    if plane.answers_itself():
        return await handler(request)
    router = plane.settings.current.router
    return await pass_on(request, plane.router.session, plane.name, plane.lease.state.lease,
                         int(router.max_body), float(router.timeouts.total))


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not request.path.startswith("/v1/") and request.path != "/v1":
        return await handler(request)
    plane = request.app[PLANE]
    secret = _presented_key(request)
    if not secret:
        return api_error(401, f"no API key: send Authorization: Bearer {KEY_PREFIX}…", "missing_api_key")
    # The throttle is asked only once a key has failed: a valid key is answered
    # whatever else its address has tried (llmgw/account/throttle.py). A key
    # memory holds needs neither the client's address nor the store.
    if secret.startswith(CHAT_PREFIX):
        return await _chat(request, handler, plane, secret)
    flaw = key_flaw(secret)
    if flaw is not None:
        return _unknown_key(request, plane, flaw)
    try:
        if plane.keys.remembers(secret):
            principal = await plane.keys.lookup(secret)
        else:
            address = _client(request, plane)
            if plane.throttle.throttled(address):
                async with plane.throttle.in_line(address):
                    principal = await plane.keys.lookup(secret)
            else:
                principal = await plane.keys.lookup(secret)
    except StoreError:
        return _store_away()
    if principal is None:
        return _unknown_key(request, plane, "unknown API key")
    now = time.time()
    refusal = principal.refusal(now)
    if refusal:
        plane.router.key_refused(principal, refusal, now)
        return api_error(401, refusal, "invalid_api_key")
    request[PRINCIPAL] = principal
    return await handler(request)


async def _chat(request: web.Request, handler: Handler, plane: ClientPlane, secret: str) -> web.StreamResponse:
    """The portal's chat credential (llmgw/account/chattokens.py): the same throttle and refusals as a key's,
    plus 403 for a project that is not the person's. The credential itself is never repeated back."""
    project = request.headers.get("x-llmgw-project") or None
    try:
        if plane.chat.remembers(secret) or not plane.throttle.throttled(_client(request, plane)):
            principal = await plane.chat.lookup(secret, project)
        else:
            async with plane.throttle.in_line(_client(request, plane)):
                principal = await plane.chat.lookup(secret, project)
    except StoreError:
        return _store_away()
    except AccountError as e:
        return api_error(e.status, str(e), e.code)
    if principal is None:
        return _unknown_key(request, plane, "this chat credential's session has ended; reload the chat page, "
                                            "signing in again if asked")
    refusal = principal.refusal(time.time())
    if refusal:
        return api_error(401, refusal, "invalid_api_key")
    request[PRINCIPAL] = principal
    return await handler(request)


def _store_away() -> web.Response:
    return api_error(503, "API keys cannot be checked right now; try again in a few seconds",
                     "store_unavailable", headers={"Retry-After": "5"})


def _client(request: web.Request, plane: ClientPlane) -> str:
    return client_address(request, plane.settings.current.router.trusted_proxies)


def _unknown_key(request: web.Request, plane: ClientPlane, sentence: str) -> web.Response:
    address = _client(request, plane)
    wait = plane.throttle.throttled(address)
    plane.throttle.failed(address)
    if wait:
        return api_error(429, f"too many unknown API keys from {address}; wait a minute, then check the key",
                         "too_many_unknown_keys", headers={"Retry-After": str(int(wait) + 1)})
    return api_error(401, sentence, "invalid_api_key")


async def list_models(request: web.Request) -> web.Response:
    plane = request.app[PLANE]
    principal: Principal = request[PRINCIPAL]
    # The registry's models: the settings' own and the catalog's (placed by the
    # leader, aliases included), whether a replica is ready now or loads on demand.
    models = [e.settings for e in plane.router.registry.models.values()]
    data = [
        {"id": m.name, "object": "model", "created": 0, "owned_by": m.owner,
         "context_length": m.context_length or None, "max_output_tokens": m.max_output_tokens or None,
         "capabilities": list(m.can)}
        for m in sorted(models, key=lambda m: m.name)
        if principal.limits.allows_model(m.name)
    ]
    return _json({"object": "list", "data": data})


def _endpoints(app: web.Application) -> list[str]:
    """The /v1 endpoints this listener serves, as "POST /v1/chat/completions"."""
    served = set()
    for route in app.router.routes():
        path = route.resource.canonical if route.resource is not None else ""
        if path.startswith("/v1/") and "{" not in path and route.method not in ("HEAD", "*"):
            served.add((path, route.method))
    return [f"{method} {path}" for path, method in sorted(served)]


async def not_found(request: web.Request) -> web.Response:
    """A 404 under /v1 that says what exists, and how to mend the usual wrong base URL.

    An Anthropic client given a base URL ending in /v1 (as OpenAI's SDK wants)
    adds another /v1 itself and calls /v1/v1/messages; a bare "no such path"
    left people guessing (issue 11). The middleware puts a messages path's
    404 in Anthropic's shape (errors.speaks_anthropic).
    """
    sentence = f"there is no {request.method} {request.path} here"
    if request.path.startswith("/v1/v1/"):
        root = f"{request.scheme}://{request.host}"
        if speaks_anthropic(request.path):
            sentence += (f"; Anthropic's SDK adds /v1 itself, so drop /v1 from its base URL: "
                         f"base_url={root} (OpenAI's SDK is the one that wants {root}/v1)")
        else:
            sentence += f"; the base URL has /v1 twice: drop one, as in {root}/v1"
    sentence += "; this gateway serves " + ", ".join(_endpoints(request.app))
    return api_error(404, sentence, "not_found")


def _missing_v1(served: dict[str, list[str]]) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The answer to a /v1 endpoint's path called without /v1: a 404 in the API's shape naming the real path.

    A client given the base URL http://host:8080 instead of http://host:8080/v1
    posts JSON to /chat/completions, which fell to the portal's pages: it got
    an HTML 403 about an expired form, which no SDK can read and no person
    would connect with the base URL (issue 25). `served` maps each path here,
    without /v1, to the methods /v1 serves it with. No key is asked for: the
    answer says only what the endpoints listing of any /v1 404 says.
    """
    async def missing_v1(request: web.Request) -> web.StreamResponse:
        resource = request.match_info.route.resource
        template = resource.canonical if resource is not None else request.path
        meant = "/v1" + request.path
        methods = served.get(template, [])
        calls = " or ".join(f"{method} {meant}" for method in ([request.method] if request.method in methods
                                                               else methods))
        root = f"{request.scheme}://{request.host}"
        sentence = (f"there is no {request.method} {request.path} here: this gateway's API is under /v1, "
                    f"so the call is {calls or meant}")
        anthropic = request.path == "/messages" or request.path.startswith("/messages/")
        if anthropic:
            sentence += (f"; Anthropic's SDK adds /v1 itself and wants base_url={root}, "
                         f"a client that adds only /messages wants {root}/v1")
        else:
            sentence += f"; give the client the base URL {root}/v1"
        response = api_error(404, sentence, "not_found")
        return in_anthropic_shape(response) if anthropic else response
    return missing_v1


def _add_missing_v1(app: web.Application) -> None:
    """Route each /v1 endpoint's path without /v1 to `_missing_v1`, unless a page of the floor above has it.

    The portal's Workflows page is /workflows, which is also /v1/workflows
    without /v1: a person opening the page got the JSON 404. A path a page
    serves is the page's. The portal's catch-all does not hide the rest, though
    it was added first: aiohttp (pinned) tries the most specific path first,
    and the catch-all's is "/".
    """
    served: dict[str, list[str]] = {}
    pages: set[str] = set()
    for route in app.router.routes():
        path = route.resource.canonical if route.resource is not None else ""
        if path.startswith("/v1/") and route.method not in ("HEAD", "*"):
            served.setdefault(path[len("/v1"):], []).append(route.method)
        elif "{" not in path:
            pages.add(path)
    answer = _missing_v1({path: sorted(set(methods)) for path, methods in served.items()})
    for path in sorted(served.keys() - pages):
        app.router.add_route("*", path, answer)


def make_client_app(plane: ClientPlane, extend: Callable[[web.Application], None] | None = None) -> web.Application:
    """The client port's app. `extend` adds routes from a floor above (the portal, issue 13): they go
    in before the /v1 catch-all, and no middleware comes with them, so /v1 pays nothing for them."""
    # The body limit is router.max_body, read live by the handlers; this one
    # only bounds what aiohttp itself would buffer for other routes.
    # The guard's middleware first: it marks a request's headers as in before anything else runs.
    guard = ConnectionGuard(plane.registry, lambda: plane.settings.current.router)
    app = web.Application(middlewares=[guard.middleware, request_id, standby, authenticate],
                          client_max_size=1024 * 1024 * 1024)
    app[PLANE] = plane
    app[CONNECTIONS] = guard
    app.router.add_get("/health", health)
    app.router.add_get("/leader", leader)
    app.router.add_get("/ready", ready)
    app.router.add_get("/v1/models", list_models)
    add_routes(app)
    add_batch_routes(app)  # /v1/files and /v1/batches (docs/batches.md)
    add_kb_routes(app)  # /v1/vector_stores (docs/knowledge.md)
    add_job_routes(app)  # /v1/workflows (docs/media.md)
    # SCIM provisioning (issue 14): before the portal's catch-all, and outside /v1, so no key check or
    # standby pass-on touches it; it answers 404 in SCIM's shape while auth.scim.enabled is off.
    mount_scim(app, plane)
    if extend is not None:
        extend(app)
    _add_missing_v1(app)  # /chat/completions and the rest without /v1: a JSON 404 naming the path, not a page
    app.router.add_route("*", "/v1/{tail:.*}", not_found)
    return app
