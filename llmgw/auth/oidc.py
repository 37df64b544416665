"""OpenID Connect sign-in: discovery, the authorization-code flow with PKCE, and the ID token's checks.

`OIDCClient` is one per portal (so per worker process). It caches the
provider's discovery document and key set for a while; everything a sign-in
in flight needs (state, nonce, PKCE verifier, where to go after) travels in
the sealed cookie of oidcflow.py, never in this object, because the callback
may reach another worker or another control plane than the start did.

The ID token comes from our own request to the token endpoint, over TLS, so
only the provider can put one in front of us; its checks (signature against
the provider's keys, issuer, audience, expiry, nonce) are still all made, as
OpenID Connect Core 3.1.3.7 asks.
"""

from __future__ import annotations

import base64
import hmac
import json
import logging
import re
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from authlib.oauth2.rfc7636 import create_s256_code_challenge
from joserfc import jwt
from joserfc.errors import BadSignatureError, InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet

from llmgw.auth.directory import Vouched
from llmgw.auth.oidcflow import NO_ADDRESS
from llmgw.auth.oidcnet import OIDCError, get_json, post_form, session
from llmgw.auth.secrets import SecretError, Secrets
from llmgw.auth.trial import Trial
from llmgw.config import OIDCSettings
from llmgw.errors import N_

log = logging.getLogger("llmgw.auth")

SOURCE = "oidc"
DISCOVERY_TTL = 300.0  # s: a provider's endpoints and keys change rarely; a rotated key is refetched at once
LEEWAY = 60.0  # s of clock difference between the provider and us that expiry forgives
_ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


@dataclass(frozen=True)
class Provider:
    """What discovery says of the provider."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    auth_methods: tuple[str, ...]  # token_endpoint_auth_methods_supported
    algorithms: tuple[str, ...]  # id_token_signing_alg_values_supported, asymmetric ones only

    @property
    def client_auth(self) -> str:
        """client_secret_basic where offered (the spec's default), else client_secret_post."""
        if "client_secret_basic" in self.auth_methods or "client_secret_post" not in self.auth_methods:
            return "client_secret_basic"
        return "client_secret_post"


def discovery_url(issuer: str) -> str:
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


def _provider(settings: OIDCSettings, doc: dict[str, Any]) -> Provider:
    said = doc.get("issuer")
    if said != settings.issuer and not (isinstance(said, str) and said.rstrip("/") == settings.issuer.rstrip("/")):
        raise OIDCError(N_('the provider calls itself "{found}", not "{issuer}"; set auth.oidc.issuer to exactly '
                           'what it says'), params={"found": str(said)[:200], "issuer": settings.issuer})
    for name in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
        if not isinstance(doc.get(name), str) or not doc[name].startswith(("https://", "http://")):
            raise OIDCError(N_("the provider's discovery document names no {name}; it is not a complete OpenID "
                               "provider"), params={"name": name})
    methods = doc.get("code_challenge_methods_supported")
    if isinstance(methods, list) and "S256" not in methods:
        raise OIDCError(N_("the provider does not offer PKCE with S256, which sign-in needs; turn it on for the "
                           "client there"))
    auth = doc.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
    algs = doc.get("id_token_signing_alg_values_supported") or ["RS256"]
    return Provider(issuer=said, authorization_endpoint=doc["authorization_endpoint"],
                    token_endpoint=doc["token_endpoint"], jwks_uri=doc["jwks_uri"],
                    auth_methods=tuple(str(m) for m in auth),
                    algorithms=tuple(a for a in algs if a in _ASYMMETRIC) or ("RS256",))


def _b64json(part: str) -> dict[str, Any]:
    try:
        found = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except ValueError:
        found = None
    if not isinstance(found, dict):
        raise OIDCError(N_("the provider's ID token is not a signed JWT"), 401)
    return found


class OIDCClient:
    """The provider's discovery and keys, cached for DISCOVERY_TTL; nothing of any one sign-in."""

    def __init__(self, *, clock: Callable[[], float] = time.time, ttl: float = DISCOVERY_TTL,
                 tls: ssl.SSLContext | None = None):
        self._clock = clock
        self._tls = tls  # None: the system's trust store
        self._ttl = ttl
        self._providers: dict[str, tuple[float, Provider]] = {}  # issuer -> (fetched at, provider)
        self._keys: dict[str, tuple[float, KeySet]] = {}  # jwks_uri -> (fetched at, keys)

    async def provider(self, settings: OIDCSettings, *, fresh: bool = False) -> Provider:
        cached = self._providers.get(settings.issuer)
        if cached is not None and not fresh and self._clock() - cached[0] < self._ttl:
            return cached[1]
        async with session(float(settings.timeout), self._tls) as http:
            doc = await get_json(http, discovery_url(settings.issuer), float(settings.timeout),
                                 "the discovery document")
        found = _provider(settings, doc)
        self._providers = {settings.issuer: (self._clock(), found)}  # one issuer at a time: bounded
        return found

    async def keys(self, settings: OIDCSettings, provider: Provider, *, fresh: bool = False) -> KeySet:
        cached = self._keys.get(provider.jwks_uri)
        if cached is not None and not fresh and self._clock() - cached[0] < self._ttl:
            return cached[1]
        async with session(float(settings.timeout), self._tls) as http:
            doc = await get_json(http, provider.jwks_uri, float(settings.timeout), "the key set")
        try:
            found = KeySet.import_key_set(doc)  # type: ignore[arg-type]
        except (JoseError, KeyError, TypeError, ValueError):
            raise OIDCError(N_("the provider's key set at {url} holds no key this gateway can use"),
                            params={"url": provider.jwks_uri}) from None
        self._keys = {provider.jwks_uri: (self._clock(), found)}
        return found

    # the flow

    def authorization_url(self, settings: OIDCSettings, provider: Provider, *, redirect_url: str,
                          state: str | None = None, nonce: str | None = None, verifier: str | None = None) -> str:
        """Where the browser is sent; without state, nonce and verifier, the URL a trial shows."""
        params = {"response_type": "code", "client_id": settings.client_id, "redirect_uri": redirect_url,
                  "scope": " ".join(settings.scopes), "code_challenge_method": "S256"}
        if state is not None:
            params["state"] = state
        if nonce is not None:
            params["nonce"] = nonce
        if verifier is not None:
            params["code_challenge"] = create_s256_code_challenge(verifier)
        joiner = "&" if "?" in provider.authorization_endpoint else "?"
        return provider.authorization_endpoint + joiner + urlencode(params, quote_via=quote)

    async def exchange(self, settings: OIDCSettings, provider: Provider, secret: str, *, code: str,
                       verifier: str, redirect_url: str) -> str:
        """The ID token the provider gives for `code`."""
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_url,
                "code_verifier": verifier}
        headers = {}
        if provider.client_auth == "client_secret_basic":
            # RFC 6749 2.3.1: each part form-encoded before base64, which a secret with ":" or "%" needs.
            pair = f"{quote(settings.client_id, safe='')}:{quote(secret, safe='')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        else:
            form |= {"client_id": settings.client_id, "client_secret": secret}
        async with session(float(settings.timeout), self._tls) as http:
            status, answer = await post_form(http, provider.token_endpoint, form, headers, float(settings.timeout))
        if status != 200 or "error" in answer:
            error = str(answer.get("error", f"HTTP {status}"))[:80]
            if error == "invalid_client":
                raise OIDCError(N_("the provider refused this gateway's client id or secret (invalid_client); check "
                                   "auth.oidc.client_id and the client secret"), 502)
            if error == "invalid_grant":
                raise OIDCError(N_("the provider refused the sign-in's code (invalid_grant): it was used already, "
                                   "has expired, or the redirect address differs; sign in again"), 400)
            raise OIDCError(N_("the provider refused the token request ({error})"), 502, params={"error": error})
        token = answer.get("id_token")
        if not isinstance(token, str) or not token:
            raise OIDCError(N_('the provider gave no ID token; check that the client asks for the "openid" scope'),
                            502)
        return token

    async def verify(self, settings: OIDCSettings, provider: Provider, token: str, *, nonce: str) -> dict[str, Any]:
        """The ID token's claims once its signature, issuer, audience, expiry and nonce are checked."""
        parts = token.split(".")
        if len(parts) != 3:
            raise OIDCError(N_("the provider's ID token is not a signed JWT"), 401)
        header = _b64json(parts[0])
        alg = header.get("alg")
        if alg not in provider.algorithms:
            raise OIDCError(N_("the ID token is signed with {alg}, which this gateway does not accept; choose "
                               "RS256 (or another public-key algorithm) at the provider"),
                            401, params={"alg": str(alg)[:20]})
        keys = await self.keys(settings, provider)
        kid = header.get("kid")
        if kid is not None and not any(k.kid == kid for k in keys):
            # A key the provider rotated in since we fetched its set: fetch once more, then refuse.
            keys = await self.keys(settings, provider, fresh=True)
        try:
            claims = jwt.decode(token, keys, algorithms=[alg]).claims
        except InvalidKeyIdError:
            raise OIDCError(N_("the ID token is signed with a key the provider does not publish"), 401) from None
        except BadSignatureError:
            raise OIDCError(N_("the ID token's signature does not match the provider's keys"), 401) from None
        except (JoseError, ValueError):
            raise OIDCError(N_("the provider's ID token is not a signed JWT"), 401) from None
        self._check(settings, provider, claims, nonce)
        return claims

    def _check(self, settings: OIDCSettings, provider: Provider, claims: dict[str, Any], nonce: str) -> None:
        if claims.get("iss") != provider.issuer:
            raise OIDCError(N_('the ID token was issued by "{found}", not by "{issuer}"'), 401,
                            params={"found": str(claims.get("iss"))[:200], "issuer": provider.issuer})
        aud = claims.get("aud")
        audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if settings.client_id not in audiences:
            raise OIDCError(N_('the ID token is for another client ("{found}"), not "{client_id}"'), 401,
                            params={"found": ", ".join(map(str, audiences))[:200], "client_id": settings.client_id})
        azp = claims.get("azp")
        if (len(audiences) > 1 or azp is not None) and azp != settings.client_id:
            raise OIDCError(N_('the ID token was given to another client ("{found}")'), 401,
                            params={"found": str(azp)[:200]})
        now = self._clock()
        exp = claims.get("exp")
        if not isinstance(exp, int | float) or now > exp + LEEWAY:
            raise OIDCError(N_("the ID token has expired; sign in again (if this keeps happening, check that this "
                               "machine's clock is right)"), 401)
        iat = claims.get("iat")
        if isinstance(iat, int | float) and iat > now + LEEWAY:
            raise OIDCError(N_("the ID token was issued in the future; check this machine's clock and the "
                               "provider's"), 401)
        if not isinstance(claims.get("nonce"), str) or not _same(claims["nonce"], nonce):
            raise OIDCError(N_("the ID token's nonce is not this sign-in's; sign in again"), 401)
        if not isinstance(claims.get("sub"), str) or not claims["sub"]:
            raise OIDCError(N_("the ID token names nobody (it has no sub)"), 401)


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def vouched(settings: OIDCSettings, claims: dict[str, Any]) -> Vouched:
    """Who the checked ID token says this is, and their groups (None when it does not say them).

    The identity is keyed by the issuer and the subject. The e-mail counts as vouched for (so a first
    sign-in may be tied to the existing account with it, llmgw.auth.directory) only when it is the
    `email` claim and the claim auth.oidc.verified_email_claim names is the boolean true: not absent (Entra
    ID sends no email_verified, and lets people edit their e-mail in many tenants: "nOAuth"), not the
    string "true" or "false", and never preferred_username or upn, which nothing verifies."""
    # Entra ID's `sub` differs per application registration (it is pairwise), so registering the app
    # anew would orphan every tie; its `oid` is the person's one id in the tenant. Elsewhere: sub.
    bare = claims["oid"] if isinstance(claims.get("oid"), str) and claims.get("tid") else claims["sub"]
    email = str(claims["email"]).strip() if isinstance(claims.get("email"), str) else ""
    named = settings.verified_email_claim
    verified = bool(email) and bool(named) and claims.get(named) is True
    if not email:
        for name in ("preferred_username", "upn"):
            value = claims.get(name)
            if isinstance(value, str) and _EMAIL.match(value):
                email = value.strip()  # an account needs an e-mail; this one is never vouched for
                break
    name = str(claims["name"]) if isinstance(claims.get("name"), str) else ""
    subject = subject_of(str(claims["iss"]), str(bare))
    return Vouched(SOURCE, subject, email, name, _groups(settings, claims, email or subject),
                   email_verified=verified, former_subject=str(bare), link_as=subject)


def subject_of(issuer: str, sub: str) -> str:
    """An OIDC identity's key: the issuer and its subject, so another provider's same `sub` is no one's."""
    return f"{issuer}#{sub}"


def _groups(settings: OIDCSettings, claims: dict[str, Any], who: str) -> frozenset[str] | None:
    claim = settings.groups_claim
    value = claims.get(claim)
    pointed = claims.get("_claim_names")
    if value is None and ((isinstance(pointed, dict) and claim in pointed) or claims.get("hasgroups") is True):
        # Entra ID sends a pointer to Graph instead of more than 200 groups (150 in a SAML token): what they
        # are is not said, so role and places stay as they were (directory.py) rather than fall to member.
        log.error('the provider sent %s\'s groups as a pointer to Microsoft Graph (more than 200 groups); their '
                  'role and places were kept as they were. In the app registration\'s Token configuration, choose '
                  '"Groups assigned to the application" so the token lists only the groups that matter', who)
        return None
    if value is None:
        if settings.roles or settings.memberships:
            log.warning('the ID token for %s has no "%s" claim, so they are in no group; if they are, map the groups '
                        'into the ID token at the provider (Keycloak: a Group Membership mapper)', who, claim)
        return frozenset()
    if isinstance(value, str):
        return frozenset({value})
    if isinstance(value, list):
        return frozenset(str(g) for g in value if isinstance(g, str | int))
    log.warning('the ID token for %s has a "%s" claim that is not a list of names; treated as no groups', who, claim)
    return frozenset()


async def client_secret(settings: OIDCSettings, secrets: Secrets) -> str:
    if not settings.client_secret_file:
        raise SecretError(N_("auth.oidc.client_secret_file is not set; keep the client's secret with llmgw ctl auth "
                             "secret set oidc-client and set client_secret_file: store:auth/oidc-client"))
    return await secrets.read(settings.client_secret_file, "auth.oidc.client_secret_file")


async def trial(settings: OIDCSettings, secrets: Secrets, *, redirect_url: str | None,
                client: OIDCClient | None = None) -> Trial:
    """Tries `settings` as a sign-in would, up to the browser's redirect: each step with one sentence.
    `redirect_url` None: no address is configured (configured_redirect), which fails the last step."""
    client = client or OIDCClient()
    tried = Trial()
    if not settings.issuer:
        tried.failed("discovery", N_("auth.oidc.issuer is empty, so single sign-on is off; set it to the "
                                     "provider's issuer URL"))
        return tried
    try:
        provider = await client.provider(settings, fresh=True)
    except OIDCError as e:
        tried.failed("discovery", str(e))
        return tried
    tried.passed("discovery", N_("{url} names the issuer {issuer}, its authorization, token and key set "
                                 "endpoints").format(url=discovery_url(settings.issuer), issuer=provider.issuer))
    try:
        keys = await client.keys(settings, provider, fresh=True)
    except OIDCError as e:
        tried.failed("key set", str(e))
        return tried
    tried.passed("key set", N_("{url} holds {count} key(s)").format(url=provider.jwks_uri, count=len(keys.keys)))
    try:
        await client_secret(settings, secrets)
    except SecretError as e:
        tried.failed("client secret", str(e))
        return tried
    tried.passed("client secret", N_("{ref} is readable; it is sent as {method}").format(
        ref=settings.client_secret_file, method=provider.client_auth))
    if redirect_url is None:
        tried.failed("redirect", NO_ADDRESS)
        return tried
    tried.passed("redirect", client.authorization_url(settings, provider, redirect_url=redirect_url))
    return tried
