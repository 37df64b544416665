"""A sign-in in flight through the provider, carried by the browser in a sealed cookie.

The start (GET /login/oidc) and the callback may be answered by different
worker processes, or different control planes behind a load balancer, and a
restart may fall between them; so state, nonce, the PKCE verifier and where
to go after are not kept in any process's memory but in a cookie sealed
(AES-GCM) under the master key, which every control plane of a cluster holds
alike. Sealed rather than only signed: the verifier must stay secret for
PKCE to mean anything. The cookie lives for FLOW_TTL and is bound to the
issuer and client it was made for.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import secrets
from dataclasses import asdict, dataclass

from llmgw.config import OIDCSettings
from llmgw.errors import N_
from llmgw.trust import MasterKey, TrustError

COOKIE = "llmgw_oidc"
COOKIE_PATH = "/login/oidc"  # sent only to the start and the callback
FLOW_TTL = 600.0  # s a person may take at the provider's login page
_PURPOSE = "oidc-flow"
CALLBACK = "/login/oidc/callback"  # the portal's (llmgw.portal.sso_pages)
NO_ADDRESS = N_("single sign-on needs the gateway's address to send people back to, and none is set; set "
                "portal.address (https://GATEWAY), or auth.oidc.redirect_url, and register "
                "https://GATEWAY/login/oidc/callback at the provider")


def configured_redirect(settings: OIDCSettings, portal_address: object) -> str | None:
    """Where the provider sends the browser back: auth.oidc.redirect_url, else portal.address's callback.

    None with neither: the address the browser used (its Host header) is never taken instead. Anyone
    can send any Host; with `Host: evil.example` the redirect_uri became http://evil.example/login/oidc/
    callback, and a provider that matched redirect URIs loosely would send the code there (issue 25)."""
    if settings.redirect_url:
        return str(settings.redirect_url)
    if portal_address:
        return str(portal_address).rstrip("/") + CALLBACK
    return None


def spent_key(state: str) -> str:
    """What the store keeps of a state once its callback came (Store.spend_sign_in): its digest, not itself."""
    return hashlib.sha256(state.encode()).hexdigest()


@dataclass(frozen=True)
class Flow:
    state: str
    nonce: str
    verifier: str  # PKCE's code_verifier
    next: str  # a local path
    redirect_url: str  # the redirect_uri of the start, which the token request must repeat
    issuer: str
    client_id: str
    started: float

    @classmethod
    def start(cls, *, next_path: str, redirect_url: str, issuer: str, client_id: str, now: float) -> Flow:
        return cls(state=secrets.token_urlsafe(24), nonce=secrets.token_urlsafe(24),
                   verifier=secrets.token_urlsafe(48), next=next_path, redirect_url=redirect_url,
                   issuer=issuer, client_id=client_id, started=now)

    def seal(self, key: MasterKey) -> str:
        sealed = key.seal(json.dumps(asdict(self), separators=(",", ":")).encode(), _PURPOSE)
        return base64.urlsafe_b64encode(sealed).decode().rstrip("=")

    @classmethod
    def open(cls, key: MasterKey, text: str, *, now: float) -> Flow | None:
        """The flow the cookie carries; None when it is not ours, is damaged, or is older than FLOW_TTL."""
        try:
            sealed = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            found = cls(**json.loads(key.unseal(sealed, _PURPOSE)))
        except (binascii.Error, ValueError, TypeError, TrustError):
            return None
        if not 0 <= now - found.started <= FLOW_TTL:
            return None
        return found
