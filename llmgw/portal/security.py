"""What every portal response carries for the browser's protection, and the checks on what it sends.

- A Content-Security-Policy with a fresh nonce per response: scripts and
  styles only from the portal itself or a tag holding that nonce, no
  `unsafe-inline`, so an injected `<script>`, `style=` or `onclick=` does
  nothing; no framing, forms post only here, no `<base>`, no plugins.
- The session cookie is HttpOnly (scripts never read it), SameSite=Lax
  (another site's form posts without it) and Path=/; Secure whenever the
  browser reached us over TLS, directly or through a trusted proxy that
  says so in X-Forwarded-Proto.
- A POST must carry the form's CSRF value and, when the browser sends an
  Origin, our own. docs/security.md lists each ASVS item and how it is met.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from urllib.parse import urlsplit

from aiohttp import web

from llmgw.router.clientaddr import parse, proxies

SESSION_COOKIE = "llmgw_session"  # llmgw.account.Sessions.COOKIE
CSRF_COOKIE = "llmgw_csrf"  # before a session: the sign-in and sign-up forms' CSRF value (double submit)
NOTICE_COOKIE = "llmgw_notice"  # one sentence for the next page ("Your password was changed")
CSRF_FIELD = "_csrf"
CSRF_HEADER = "X-CSRF-Token"


def new_nonce() -> str:
    return secrets.token_urlsafe(16)


def content_security_policy(nonce: str) -> str:
    return "; ".join((
        "default-src 'self'",
        f"script-src 'self' 'nonce-{nonce}'",
        f"style-src 'self' 'nonce-{nonce}'",
        # blob: for the pictures the Workflows page fetched with its credential: only the page's own scripts make
        # one, and an <img> cannot send the Authorization header that fetching the file needs (docs/portal.md).
        "img-src 'self' data: blob:",
        "connect-src 'self'",
        "frame-ancestors 'none'",
        "form-action 'self'",
        "base-uri 'none'",
        "object-src 'none'",
    ))


def protect(response: web.StreamResponse, nonce: str, *, private: bool) -> None:
    """The headers every portal page and redirect carries. `private`: the answer is for one person
    (signed in, or holding a form's CSRF value), so no cache, shared or the browser's, keeps it."""
    headers = response.headers
    headers["Content-Security-Policy"] = content_security_policy(nonce)
    headers["X-Content-Type-Options"] = "nosniff"
    headers["Referrer-Policy"] = "same-origin"
    headers["X-Frame-Options"] = "DENY"  # frame-ancestors for browsers that predate it
    if private:
        headers["Cache-Control"] = "no-store"


def over_tls(request: web.Request, trusted_proxies: Sequence[str]) -> bool:
    """Whether the browser reached us over TLS: this connection's, or a trusted proxy's word for it."""
    if request.secure:
        return True
    if not proxies(tuple(trusted_proxies)).trusts(parse(request.remote or "")):
        return False
    proto = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
    return proto == "https"


def set_cookie(response: web.StreamResponse, name: str, value: str, *, secure: bool,
               max_age: int | None = None) -> None:
    response.set_cookie(name, value, path="/", httponly=True, samesite="Lax", secure=secure, max_age=max_age)


def drop_cookie(response: web.StreamResponse, name: str, *, secure: bool) -> None:
    response.del_cookie(name, path="/", secure=secure, httponly=True, samesite="Lax")


def same_origin(request: web.Request, trusted_proxies: Sequence[str]) -> bool:
    """False when the browser says the request comes from another site's page.

    Browsers send Origin with every POST; a client that sends none (curl)
    still needs the form's CSRF value, which another site cannot read.
    """
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    if origin == "null":
        return False
    host = urlsplit(origin).netloc.lower()
    ours = {request.host.lower()}
    if proxies(tuple(trusted_proxies)).trusts(parse(request.remote or "")):
        forwarded = request.headers.get("X-Forwarded-Host", "").split(",")[0].strip().lower()
        if forwarded:
            ours.add(forwarded)
    return host in ours


def same_secret(given: str, expected: str) -> bool:
    return bool(given) and bool(expected) and hmac.compare_digest(given.encode(), expected.encode())


def local_path(target: str | None, fallback: str = "/") -> str:
    """`target` when it is a path on this site ("/keys?x=1"), else `fallback`: ?next= never leads away."""
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")):
        return fallback
    if any(ord(c) < 0x20 or c in "\\" for c in target):
        return fallback
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return fallback
    return target


def sign(key: str, text: str) -> str:
    """`text` with a MAC under `key`, for a short cookie whose content we must not be handed by another."""
    mac = hmac.new(key.encode(), text.encode(), hashlib.sha256).hexdigest()[:32]
    return f"{mac}.{text}"


def unsign(key: str, signed: str) -> str | None:
    mac, _, text = signed.partition(".")
    if not key or not text:
        return None
    return text if hmac.compare_digest(sign(key, text), f"{mac}.{text}") else None
