"""The cluster CA in the admin API: what `llmgw node add` and `llmgw mirror add-peer` call.

    POST /api/v1/nodes/join-codes          a one-time join code; the answer carries the code once, the store keeps
                                           only its secret's sha256
    POST /api/v1/mirrors/certificate       {name, hosts, csr}: a model mirror's certificate for the CSR made on the
                                           mirror's machine; the answer carries it and the CA's certificate

The second takes a CSR rather than making a key here: the mirror's key is made on its own machine and never
travels, so it is in no answer, no log and no SSH channel, and the admin token lets one get a certificate, not a
key. It costs `add-peer` one more command over SSH (`llmgw onboard mirror-key`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from llmgw.config import Duration
from llmgw.control.adminapi import PLANE, Refused, _field, _json, actor, body
from llmgw.trust import DEFAULT_JOIN_TTL, JoinRefused

if TYPE_CHECKING:
    from llmgw.control.plane import ControlPlane


async def join_code_create(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    data = await body(request)
    ttl_text = _field(data, "ttl", str)
    try:
        ttl = float(Duration.parse(ttl_text)) if ttl_text else DEFAULT_JOIN_TTL
    except ValueError as e:
        raise Refused(400, f"--ttl: {e}", "invalid_request") from None
    control_planes = _field(data, "control_planes", list)
    if control_planes is not None:
        from llmgw.config import Address

        for cp in control_planes:
            try:
                addr = Address(cp) if isinstance(cp, str) else None
            except ValueError:
                addr = None
            if addr is None or not addr.host or addr.port == 0:
                raise Refused(400, f"--control-plane: expected HOST:PORT of a control plane's agent port, "
                                   f"like 10.0.0.5:7443, got {cp!r}", "invalid_request")
    who = actor(request)
    try:
        made = await plane.trust.new_join_code(who.name, who.via, name=_field(data, "name", str), ttl=ttl,
                                               control_planes=control_planes or None)
    except JoinRefused as e:
        raise Refused(e.status, str(e), e.code) from None
    if plane.trust.problem:
        made["warning"] = plane.trust.problem
    return _json(made, 201)


async def mirror_certificate(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    data = await body(request)
    name = _field(data, "name", str, required=True)
    csr = _field(data, "csr", str, required=True)
    hosts = _field(data, "hosts", list, required=True)
    if not all(isinstance(h, str) for h in hosts):
        raise Refused(400, '"hosts" is a list of addresses and host names', "invalid_request")
    who = actor(request)
    try:
        made = await plane.trust.sign_mirror(csr, name, hosts, who.name, who.via)
    except JoinRefused as e:
        raise Refused(e.status, str(e), e.code) from None
    return _json(made, 201)


def register(r: web.UrlDispatcher) -> None:
    r.add_post("/api/v1/nodes/join-codes", join_code_create)
    r.add_post("/api/v1/mirrors/certificate", mirror_certificate)
