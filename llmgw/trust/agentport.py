"""The agent port's application: the join routes, and the rule that everything else needs a cluster certificate.

`make_agent_app(trust, mounts)` builds it; whoever serves agents' streams
(or the standbys' exchange) passes a function that adds its routes, and
reads who is calling with `peer_node_id(request)` or
`peer_control_plane(request)`. The middleware has already refused a request
without a verified cluster certificate, so a route added later cannot be
left open by mistake. Only `GET /join/ca` and `POST /join` answer a client
without one. A model mirror's certificate (`llmgw mirror add-peer`) is from
the same CA but is no node's and no control plane's: it is refused here
with the rest, before any route.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from llmgw import __version__
from llmgw.store import StoreError
from llmgw.trust.authority import ClusterTrust, JoinRefused
from llmgw.trust.tls import peer_identity

TRUST = web.AppKey("trust", ClusterTrust)
PEER = web.RequestKey("llmgw_peer", tuple)  # request[PEER]: ("node", id) or ("control-plane", name)
JOIN_PATH = "/join"
JOIN_CA_PATH = "/join/ca"
WHOAMI_PATH = "/whoami"
OPEN_PATHS = frozenset({JOIN_PATH, JOIN_CA_PATH})
# A CSR is under 1 KiB; a join body is never large, and it is read from
# anyone who can reach the port.
MAX_JOIN_BODY = 16 * 1024


def _error(status: int, message: str, code: str) -> web.Response:
    return web.Response(status=status, body=orjson.dumps({"error": {"message": message, "code": code}}),
                        content_type="application/json")


@web.middleware
async def cluster_only(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path in OPEN_PATHS:
        return await handler(request)
    who = peer_identity(request)
    if who is None:
        return _error(403, "the agent port takes cluster certificates only; a new node joins with "
                           "llmgw join CODE (from llmgw node add on a control plane)", "certificate_required")
    if who[0] not in ("node", "control-plane"):
        # A mirror reads other mirrors; nothing on the agent port is its business, and a route that checks
        # only "has a cluster certificate" must not answer it.
        return _error(403, f"the agent port takes nodes' and control planes' certificates; this is a "
                           f"{who[0]}'s ({who[1]})", "certificate_required")
    request[PEER] = who
    return await handler(request)


async def join_ca(request: web.Request) -> web.Response:
    """The CA's certificate, for a node to compare with the fingerprint in its
    code. Public: a CA certificate is no secret, and the node trusts it
    only if the fingerprint matches."""
    trust: ClusterTrust = request.app[TRUST]
    return web.Response(text=trust.ca_pem, content_type="application/x-pem-file")


async def join(request: web.Request) -> web.Response:
    trust: ClusterTrust = request.app[TRUST]
    if request.content_length is not None and request.content_length > MAX_JOIN_BODY:
        return _error(413, "a join request is a token and a CSR, a few KiB at most", "too_large")
    try:
        # read(), not content.read(): the body is cached for any middleware that read it first.
        raw = await request.read()
        if len(raw) > MAX_JOIN_BODY:
            return _error(413, "a join request is a token and a CSR, a few KiB at most", "too_large")
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _error(400, "a join request is JSON: {\"token\", \"csr\", \"name\"}", "invalid_json")
    if not isinstance(data, dict) or not isinstance(data.get("token"), str) or not isinstance(data.get("csr"), str):
        return _error(400, "a join request needs \"token\" and \"csr\", both text", "invalid_request")
    name = data.get("name") if isinstance(data.get("name"), str) else None
    try:
        joined = await trust.join(data["token"], data["csr"], name)
    except JoinRefused as e:
        return _error(e.status, str(e), e.code)
    except StoreError as e:
        return _error(503, str(e), "store_unavailable")
    return web.Response(body=orjson.dumps({"node_id": joined.node_id, "name": joined.name,
                                           "certificate": joined.cert_pem, "ca": joined.ca_pem}),
                        content_type="application/json")


async def whoami(request: web.Request) -> web.Response:
    """Who this control plane takes the caller for: what `llmgw doctor` on a
    node asks to check that its certificate is accepted."""
    trust: ClusterTrust = request.app[TRUST]
    kind, ident = request[PEER]
    return web.Response(body=orjson.dumps({"kind": kind, "id": ident, "control_plane": trust.name,
                                           "version": __version__}),
                        content_type="application/json")


def make_agent_app(trust: ClusterTrust,
                   mounts: Iterable[Callable[[web.Application], None]] = ()) -> web.Application:
    """The agent port's application: the join routes, then each of `mounts`
    called with the app to add its own routes behind the certificate rule."""
    app = web.Application(middlewares=[cluster_only])
    app[TRUST] = trust
    app.router.add_get(JOIN_CA_PATH, join_ca)
    app.router.add_post(JOIN_PATH, join)
    app.router.add_get(WHOAMI_PATH, whoami)
    for mount in mounts:
        mount(app)
    return app
