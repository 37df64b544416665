"""Signing in and out, and the portal's front door."""

from __future__ import annotations

import hashlib
import hmac
from typing import TypedDict

from aiohttp import web

from llmgw.account import AccountError
from llmgw.errors import N_
from llmgw.portal import directory_signin, i18n, security
from llmgw.portal.sso_pages import signin_offer
from llmgw.portal.web import LANG, PORTAL, Viewer, form, page, redirect, render, render_error, secure
from llmgw.router import client_address

# Roles are shown as _(role) (profile.html); here so that they are extracted for translation.
ROLE_NAMES = (N_("admin"), N_("operator"), N_("member"))


@page("/", role=None)
async def home(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    return redirect(request, "/chat")


@page("/signin", methods=("GET", "POST"), public=True)
async def signin(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    target = security.local_path(request.query.get("next"))
    if request.method == "GET":
        if viewer is not None:
            return redirect(request, target)
        return render(request, "signin.html", title=N_("Sign in"), next=target, email="", error=None,
                      signup_open=bool(request.app[PORTAL].plane.settings.current.auth.signup.domains),
                      directory=directory_signin.form_label(request.app[PORTAL]), **signin_offer(request, target))
    posted = await form(request)
    target = security.local_path(posted.get("next"))
    email = posted.get("email", "").strip()
    portal = request.app[PORTAL]
    address = client_address(request, portal.trusted_proxies())
    try:
        signed = await directory_signin.sign_in(portal, email, posted.get("password", ""), address=address,
                                                agent=request.headers.get("User-Agent", ""))
    except AccountError as e:
        return render(request, "signin.html", status=e.status, title=N_("Sign in"), next=target, email=email,
                      error=i18n.say(request[LANG], e), directory=directory_signin.form_label(portal),
                      **signin_offer(request, target))
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


# --- signing up ---------------------------------------------------------------------------------


class _SignUpForm(TypedDict):
    """signup.html's values: the form as typed, kept when it is refused."""

    title: str
    domains: list[str]
    error: str | None
    email: str
    name: str


@page("/signup", methods=("GET", "POST"), public=True)
async def signup(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    """A person making their own account: only when auth.signup.domains names their e-mail's domain."""
    portal = request.app[PORTAL]
    settings = portal.plane.settings.current.auth.signup
    if not settings.domains:
        return render_error(request, 404, N_("Signing up is off here; ask an administrator to add you."))
    if viewer is not None and request.method == "GET":
        return redirect(request, "/")
    values = _SignUpForm(title=N_("Sign up"), domains=settings.domains, error=None, email="", name="")
    if request.method == "GET":
        return render(request, "signup.html", **values)
    posted = await form(request)
    email, name = posted.get("email", "").strip(), posted.get("name", "").strip()
    values |= {"email": email, "name": name}
    if posted.get("password", "") != posted.get("again", ""):
        return render(request, "signup.html", status=400, **values | {
            "error": i18n.gettext(request[LANG], N_("The two passwords differ; type the same one twice."))})
    try:
        person = await portal.people.sign_up(email=email, name=name,
                                             password=posted.get("password", ""), signup=settings)
    except AccountError as e:
        return render(request, "signup.html", status=e.status, **values | {"error": i18n.say(request[LANG], e)})
    signed = await portal.sessions.open(person, address=client_address(request, portal.trusted_proxies()),
                                        agent=request.headers.get("User-Agent", ""))
    response = redirect(request, "/", notice=N_("Welcome! Your account is ready."))
    security.set_cookie(response, security.SESSION_COOKIE, signed.token, secure=secure(request))
    return response


# --- one's own profile --------------------------------------------------------------------------


def _ref(viewer: Viewer, session_id: str) -> str:
    """How the profile page names a session in its forms: never the id the store keeps it under."""
    return hmac.new(viewer.csrf.encode(), session_id.encode(), hashlib.sha256).hexdigest()[:20]


async def _profile(request: web.Request, viewer: Viewer, *, status: int = 200,
                   error: str | None = None, new_token: str | None = None) -> web.Response:
    portal = request.app[PORTAL]
    # An administrator's own tokens for llmgw on the command line (llmgw.account.persontokens).
    tokens = await portal.accounts.tokens.of(viewer.person) if viewer.tenant else []
    sessions = [
        {"ref": _ref(viewer, s.id), "this": s.id == viewer.session.id, "created_at": s.created_at,
         "last_seen_at": s.last_seen_at, "address": s.address, "agent": s.agent}
        for s in await portal.store.list_sessions(viewer.person.id)
    ]
    return render(request, "profile.html", status=status, title=N_("Your profile"), error=error,
                  sessions=sessions, must_change=viewer.person.must_change_password,
                  locale=viewer.person.locale or "", tokens=tokens, new_token=new_token)


@page("/profile", methods=("GET", "POST"), role=None)
async def profile(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None  # not a public page: the frame sent anyone signed out to /signin
    if request.method == "GET":
        return await _profile(request, viewer)
    portal = request.app[PORTAL]
    posted = await form(request)
    action = posted.get("action", "")
    try:
        if action == "password":
            if posted.get("new", "") != posted.get("again", ""):
                return await _profile(request, viewer, status=400, error=i18n.gettext(
                    viewer.lang, N_("The two new passwords differ; type the same one twice.")))
            await portal.people.change_password(viewer.actor(), viewer.person.id, posted.get("current", ""),
                                                posted.get("new", ""), keep_session=viewer.session.id)
            return redirect(request, "/profile", notice=N_("Your password is changed; your other sessions "
                                                           "have ended."))
        if action == "language":
            chosen = posted.get("locale", "")
            await portal.people.set_locale(viewer.person.id, chosen or None)
            return redirect(request, "/profile", notice=N_("Your language is saved."))
        if action == "end":
            ref = posted.get("session", "")
            for s in await portal.store.list_sessions(viewer.person.id):
                if hmac.compare_digest(_ref(viewer, s.id), ref) and s.id != viewer.session.id:
                    await portal.store.delete_session(s.id)
                    return redirect(request, "/profile", notice=N_("That session has ended."))
            return redirect(request, "/profile", notice=N_("That session had already ended."))
        if action == "token" and viewer.tenant:
            _, secret = await portal.accounts.tokens.make(viewer.actor(), viewer.person)
            # In this answer only (no-store, as every signed-in page): never in a URL, a cookie or a log.
            return await _profile(request, viewer, new_token=secret)
        if action == "revoke-token" and viewer.tenant:
            await portal.accounts.tokens.revoke(viewer.actor(), viewer.person, posted.get("token", ""))
            return redirect(request, "/profile#tokens", notice=N_("That token is refused from now on."))
        if action == "end-others":
            await portal.store.delete_sessions(viewer.person.id, keep=viewer.session.id)
            return redirect(request, "/profile", notice=N_("Your other sessions have ended."))
    except AccountError as e:
        return await _profile(request, viewer, status=e.status, error=i18n.say(viewer.lang, e))
    return await _profile(request, viewer, status=400, error=i18n.gettext(
        viewer.lang, N_("That form asked for nothing this page does.")))
