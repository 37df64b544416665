"""People in the admin API: what `llmgw people` calls.

    GET  /api/v1/people                          everyone
    POST /api/v1/people                          {email, name, role?, password?, member_of?: [PLACE]}
    GET  /api/v1/people/{ident}                  one person (e-mail or usr_ id), places and sessions
    POST /api/v1/people/{ident}/role             {role}
    POST /api/v1/people/{ident}/suspend          {lift?: bool}
    POST /api/v1/people/{ident}/reset-password
    POST /api/v1/people/{ident}/memberships      {place, remove?: bool}
    POST /api/v1/people/{ident}/link             {source: oidc|ldap|scim, subject}
    POST /api/v1/people/{ident}/administer       {place: org:NAME|team:ORG/TEAM, remove?: bool}
    GET  /api/v1/people/{ident}/tokens           their own tokens for the admin API (never the secrets)
    POST /api/v1/people/{ident}/tokens           a new one, in the answer once as "token"
    POST /api/v1/people/{ident}/tokens/{id}/revoke

A tenant administrator's token (llmgw.account.persontokens) reaches the routes
TENANT_ROUTES lists, each handler passing their scope to People.

Each calls llmgw.account.People, which checks and audits the change as the
token's holder (and the login `llmgw ctl` claims). A password made here is in
the answer once, as "password", and in no audit entry or log line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from llmgw.control.adminapi import PLANE, Refused, _field, _json, actor, body, within

if TYPE_CHECKING:
    from llmgw.account import People
    from llmgw.control.plane import ControlPlane


def _people(request: web.Request) -> People:
    plane: ControlPlane = request.app[PLANE]
    return plane.accounts.people


async def people_list(request: web.Request) -> web.Response:
    return _json(await _people(request).list(within(request)))


async def person_add(request: web.Request) -> web.Response:
    data = await body(request)
    member_of = _field(data, "member_of", list) or []
    if not all(isinstance(p, str) for p in member_of):
        raise Refused(400, '"member_of" is a list of places like team:ORG/TEAM', "invalid_request")
    view, made = await _people(request).add(
        actor(request), email=_field(data, "email", str, True), name=_field(data, "name", str, True),
        role=_field(data, "role", str) or "member", password=_field(data, "password", str), member_of=member_of,
        within=within(request))
    return _json({**view, "password": made} if made is not None else view, 201)


async def person_show(request: web.Request) -> web.Response:
    return _json(await _people(request).show(request.match_info["ident"], within(request)))


async def person_role(request: web.Request) -> web.Response:
    data = await body(request)
    return _json(await _people(request).set_role(actor(request), request.match_info["ident"],
                                                 _field(data, "role", str, True), within(request)))


async def person_suspend(request: web.Request) -> web.Response:
    data = await body(request)
    lift = bool(_field(data, "lift", bool))
    view = await _people(request).suspend(actor(request), request.match_info["ident"], lift=lift,
                                          within=within(request))
    # Their keys are refused (or let in again) here at once; other control
    # planes and workers see it within auth.cache_ttl.
    request.app[PLANE].keys.clear()
    return _json(view)


async def person_reset_password(request: web.Request) -> web.Response:
    view, password = await _people(request).reset_password(actor(request), request.match_info["ident"],
                                                           within(request))
    return _json({**view, "password": password})


async def person_memberships(request: web.Request) -> web.Response:
    data = await body(request)
    people, who, ident = _people(request), actor(request), request.match_info["ident"]
    place = _field(data, "place", str, True)
    if _field(data, "remove", bool):
        return _json(await people.leave(who, ident, place, within(request)))
    return _json(await people.join(who, ident, place, within(request)))


async def person_administer(request: web.Request) -> web.Response:
    """{place, remove?}: make the person the administrator of an org or a team, or no longer (issue 31)."""
    data = await body(request)
    return _json(await _people(request).administer(
        actor(request), request.match_info["ident"], _field(data, "place", str, True),
        remove=bool(_field(data, "remove", bool)), within=within(request)))


async def person_tokens(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    person = await _people(request).person(request.match_info["ident"])
    return _json(await plane.accounts.tokens.of(person))


async def person_token_make(request: web.Request) -> web.Response:
    """A token of the person's own for the admin API, in the answer once as "token"."""
    plane: ControlPlane = request.app[PLANE]
    person = await _people(request).person(request.match_info["ident"])
    view, secret = await plane.accounts.tokens.make(actor(request), person)
    return _json({**view, "token": secret}, 201)


async def person_token_revoke(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    person = await _people(request).person(request.match_info["ident"])
    return _json(await plane.accounts.tokens.revoke(actor(request), person, request.match_info["token_id"]))


async def person_link(request: web.Request) -> web.Response:
    """A directory's identity tied to the person on purpose (llmgw.auth.DirectoryAccounts.link): what a sign-in
    refused for an e-mail the directory does not vouch for tells an administrator to do."""
    data = await body(request)
    plane: ControlPlane = request.app[PLANE]
    return _json(await plane.directory.link(actor(request), request.match_info["ident"],
                                            _field(data, "source", str, True), _field(data, "subject", str, True)))


def register(r: web.UrlDispatcher) -> None:
    r.add_get("/api/v1/people", people_list)
    r.add_post("/api/v1/people", person_add)
    r.add_get("/api/v1/people/{ident}", person_show)
    r.add_post("/api/v1/people/{ident}/role", person_role)
    r.add_post("/api/v1/people/{ident}/suspend", person_suspend)
    r.add_post("/api/v1/people/{ident}/reset-password", person_reset_password)
    r.add_post("/api/v1/people/{ident}/memberships", person_memberships)
    r.add_post("/api/v1/people/{ident}/link", person_link)
    r.add_post("/api/v1/people/{ident}/administer", person_administer)
    r.add_get("/api/v1/people/{ident}/tokens", person_tokens)
    r.add_post("/api/v1/people/{ident}/tokens", person_token_make)
    r.add_post("/api/v1/people/{ident}/tokens/{token_id}/revoke", person_token_revoke)
