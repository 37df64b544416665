"""Signing in through the company's OpenID provider: the start, and the provider's way back.

GET /login/oidc sends the browser to the provider with a fresh state, nonce
and PKCE challenge, kept in a sealed cookie (llmgw.auth.oidcflow says why
not in memory). GET /login/oidc/callback checks that the provider's answer
belongs to that cookie, exchanges the code, checks the ID token, and signs
in the account the directory rules (llmgw.auth.directory) give for it. Every
refusal is the sign-in page with one sentence, never a traceback.
"""

from __future__ import annotations

import logging
import re
import time
from typing import TypedDict
from urllib.parse import quote

from aiohttp import web

from llmgw.account import AccountError, Actor
from llmgw.auth import (
    CALLBACK,
    COOKIE,
    COOKIE_PATH,
    FLOW_TTL,
    NO_ADDRESS,
    Flow,
    GroupMap,
    OIDCError,
    SecretError,
    client_secret,
    configured_redirect,
    spent_key,
    vouched,
)
from llmgw.config import OIDCSettings
from llmgw.errors import N_, ExpectedError
from llmgw.portal import i18n, security
from llmgw.portal.web import LANG, PORTAL, Viewer, page, redirect, render, render_error, secure
from llmgw.router import client_address

log = logging.getLogger("llmgw.portal")

NO_ADDRESS_SHOWN = N_("Single sign-on is not ready here: an administrator must first set the gateway's address "
                      "(portal.address). Sign in with your password meanwhile.")
_ERROR_CODE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def _settings(request: web.Request) -> OIDCSettings:
    return request.app[PORTAL].plane.settings.current.auth.oidc


def redirect_url(request: web.Request) -> str | None:
    """Where the provider sends the browser back: auth.oidc.redirect_url, else portal.address's callback;
    None with neither (llmgw.auth.oidcflow.configured_redirect says why the Host header is not used)."""
    current = request.app[PORTAL].plane.settings.current
    return configured_redirect(current.auth.oidc, current.portal.address)


class SsoButton(TypedDict):
    label: str
    href: str


class SigninOffer(TypedDict):
    """signin.html's values for single sign-on."""

    sso: SsoButton | None  # None: single sign-on is off
    passwords_folded: bool  # auth.oidc.no_passwords: the password form is folded away under the button


def signin_offer(request: web.Request, target: str) -> SigninOffer:
    """What signin.html shows of single sign-on: its button, and whether the password form is folded away."""
    settings = _settings(request)
    if not settings.enabled:
        return {"sso": None, "passwords_folded": False}
    label = settings.label or i18n.gettext(request[LANG], N_("single sign-on"))
    href = "/login/oidc" + ("" if target == "/" else "?next=" + quote(target, safe="/"))
    return {"sso": {"label": label, "href": href}, "passwords_folded": settings.no_passwords}


def refused(request: web.Request, status: int, sentence: str, *, translated: bool = False,
            target: str = "/") -> web.Response:
    """The sign-in page with one sentence saying why single sign-on did not sign this person in;
    `target`, where they were going, is kept for their next try."""
    lang = request[LANG]
    portal = request.app[PORTAL]
    response = render(request, "signin.html", status=status, title=N_("Sign in"), next=target, email="",
                      error=sentence if translated else i18n.gettext(lang, sentence),
                      signup_open=bool(portal.plane.settings.current.auth.signup.domains),
                      **signin_offer(request, target))
    response.del_cookie(COOKIE, path=COOKIE_PATH)  # a flow that failed is not tried twice
    return response


@page("/login/oidc", public=True)
async def start(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    portal = request.app[PORTAL]
    settings = _settings(request)
    if not settings.enabled:
        return render_error(request, 404, N_("Single sign-on is not set up here; sign in with your password."))
    target = security.local_path(request.query.get("next"))
    try:
        provider = await portal.oidc.provider(settings)
        key = await portal.secrets.master_key()
    except (OIDCError, SecretError) as e:
        log.warning("single sign-on could not start: %s", e)
        return refused(request, 502, i18n.say(request[LANG], e), translated=True)
    back = redirect_url(request)
    if back is None:
        log.warning("single sign-on did not start: %s", NO_ADDRESS)
        return refused(request, 503, NO_ADDRESS_SHOWN)
    flow = Flow.start(next_path=target, redirect_url=back, issuer=settings.issuer, client_id=settings.client_id,
                      now=time.time())
    response = web.HTTPSeeOther(portal.oidc.authorization_url(settings, provider, redirect_url=back,
                                                              state=flow.state, nonce=flow.nonce,
                                                              verifier=flow.verifier))
    # SameSite=Lax: the provider's redirect back is a top-level GET, which carries it.
    response.set_cookie(COOKIE, flow.seal(key), path=COOKIE_PATH, httponly=True, samesite="Lax",
                        secure=secure(request), max_age=int(FLOW_TTL))
    return response


@page(CALLBACK, public=True)
async def callback(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    portal = request.app[PORTAL]
    settings = _settings(request)
    if not settings.enabled:
        return render_error(request, 404, N_("Single sign-on is not set up here; sign in with your password."))
    error = request.query.get("error")
    if error is not None:
        # The provider's own description is not shown: it is text anyone can put in a link to this page.
        code = error if _ERROR_CODE.match(error) else "?"
        log.info("the provider did not sign someone in: %s", code)
        if code == "access_denied":
            return refused(request, 403, N_("The sign-in was declined at the provider; sign in again, or ask an "
                                            "administrator to give you access to this application there."))
        return refused(request, 400, i18n.gettext(request[LANG], N_(
            "The provider did not sign you in ({error}); try again, or ask an administrator.")).format(error=code),
            translated=True)
    try:
        key = await portal.secrets.master_key()
    except SecretError as e:
        log.warning("single sign-on could not open its cookie: %s", e)
        return refused(request, 502, i18n.say(request[LANG], e), translated=True)
    flow = Flow.open(key, request.cookies.get(COOKIE, ""), now=time.time())
    state = request.query.get("state", "")
    if (flow is None or not security.same_secret(state, flow.state) or flow.issuer != settings.issuer
            or flow.client_id != settings.client_id):
        return refused(request, 400, N_("This sign-in has expired or was started in another browser or tab; "
                                        "sign in again."))
    code = request.query.get("code", "")
    if not code:
        return refused(request, 400, N_("The provider sent no sign-in code back; sign in again."))
    now = time.time()
    if not await portal.store.spend_sign_in(spent_key(flow.state), now, flow.started + FLOW_TTL + 60):
        # Spent in the store, so on every control plane and worker: a replayed cookie, state and code
        # would otherwise sign in again wherever the provider does not refuse a reused code (issue 25).
        log.warning("a single sign-on callback came again with a state already used; refused")
        return refused(request, 400, N_("This sign-in was used already; sign in again."))
    try:
        provider = await portal.oidc.provider(settings)
        secret = await client_secret(settings, portal.secrets)
        token = await portal.oidc.exchange(settings, provider, secret, code=code, verifier=flow.verifier,
                                           redirect_url=flow.redirect_url)
        claims = await portal.oidc.verify(settings, provider, token, nonce=flow.nonce)
        who = vouched(settings, claims)
        person = await portal.directory.account(who, GroupMap.of(settings), create=settings.create_accounts,
                                                actor=Actor(who.email or who.subject, "oidc"))
    except (OIDCError, AccountError, SecretError) as e:
        log.warning("single sign-on refused a sign-in: %s", e)
        status = getattr(e, "status", 502)
        return refused(request, status if isinstance(status, int) else 502, i18n.say(request[LANG], e),
                       translated=True, target=flow.next)
    except ExpectedError as e:  # the store's, say: still a sentence, never a traceback
        log.warning("single sign-on failed: %s", e)
        return refused(request, 502, i18n.say(request[LANG], e), translated=True, target=flow.next)
    signed = await portal.sessions.open(person, address=client_address(request, portal.trusted_proxies()),
                                        agent=request.headers.get("User-Agent", ""))
    old = request.cookies.get(security.SESSION_COOKIE)
    if old:
        await portal.sessions.sign_out(old)  # a new token at each sign-in: one planted before is worth nothing
    response = redirect(request, flow.next)
    security.set_cookie(response, security.SESSION_COOKIE, signed.token, secure=secure(request))
    response.del_cookie(COOKIE, path=COOKIE_PATH)
    return response
