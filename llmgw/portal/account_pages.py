"""Signing in and out, and the portal's front door."""

from __future__ import annotations

from aiohttp import web

from llmgw.account import AccountError
from llmgw.errors import N_
from llmgw.portal import i18n, security
from llmgw.portal.web import LANG, PORTAL, Viewer, form, page, redirect, render, secure
from llmgw.router.clientaddr import client_address


@page("/", role=None)
async def home(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    return redirect(request, "/chat")


@page("/signin", methods=("GET", "POST"), public=True)
async def signin(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    target = security.local_path(request.query.get("next"))
    if request.method == "GET":
        if viewer is not None:
            return redirect(request, target)
        return render(request, "signin.html", title=N_("Sign in"), next=target, email="", error=None)
    posted = await form(request)
    target = security.local_path(posted.get("next"))
    email = posted.get("email", "").strip()
    portal = request.app[PORTAL]
    address = client_address(request, portal.trusted_proxies())
    try:
        signed = await portal.sessions.sign_in(email, posted.get("password", ""), address=address,
                                               agent=request.headers.get("User-Agent", ""))
    except AccountError as e:
        return render(request, "signin.html", status=e.status, title=N_("Sign in"), next=target, email=email,
                      error=i18n.say(request[LANG], e))
    old = request.cookies.get(security.SESSION_COOKIE)
    if old:
        await portal.sessions.sign_out(old)  # a new token at each sign-in: one planted before is worth nothing
    response = redirect(request, target)
    security.set_cookie(response, security.SESSION_COOKIE, signed.token, secure=secure(request))
    return response


@page("/signout", methods=("POST",), role=None)
async def signout(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    portal = request.app[PORTAL]
    await portal.sessions.sign_out(request.cookies.get(security.SESSION_COOKIE, ""))
    response = redirect(request, "/signin", notice=N_("You are signed out."))
    security.drop_cookie(response, security.SESSION_COOKIE, secure=secure(request))
    return response
