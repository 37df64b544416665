"""Talking to an OpenID provider over HTTP, with each way it can fail said as one sentence.

The sign-in page, `llmgw ctl auth test oidc` and the admin page all show
these sentences, so a failure names its cause (an unknown CA, a certificate
for another host, a refused port, a timeout, an answer that is not JSON) and
what to do, rather than aiohttp's exception.
"""

from __future__ import annotations

import asyncio
import errno
import json
import ssl
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from llmgw.connecterror import connect_failure
from llmgw.errors import N_, ExpectedError

_MAX_BODY = 1 << 20  # a discovery document or key set is a few kB; a MB is no provider's


class OIDCError(ExpectedError):
    """A sign-in through the provider that could not go on, as a sentence; `status` fits the portal's answer."""

    def __init__(self, message: str, status: int = 502, *, params: dict[str, object] | None = None):
        super().__init__(message, params=params)
        self.status = status


def _host(url: str) -> str:
    split = urlsplit(url)
    return split.hostname or url


def _certificate_problem(url: str, error: BaseException) -> OIDCError:
    """Which of the usual TLS failures this is: an authority we do not trust, a certificate for another
    name, an expired one; the rest with OpenSSL's own words."""
    host = _host(url)
    verify = getattr(error, "certificate_error", error)
    code = getattr(verify, "verify_code", None)
    message = str(getattr(verify, "verify_message", "") or verify)
    if code in (18, 19, 20, 21) or "issuer certificate" in message or "self-signed" in message:
        return OIDCError(N_("{host}'s certificate is signed by an authority this machine does not trust; add the "
                            "provider's CA to the system's trust store (update-ca-certificates)"),
                         params={"host": host})
    if code == 62 or "Hostname mismatch" in message or "IP address mismatch" in message:
        return OIDCError(N_("{host}'s certificate is not for {host} (the name is not among its SANs); use the "
                            "address the certificate names in issuer"), params={"host": host})
    if code == 10 or "expired" in message:
        return OIDCError(N_("{host}'s certificate has expired; the provider's administrator must renew it"),
                         params={"host": host})
    return OIDCError(N_("TLS with {host} failed: {reason}"), params={"host": host, "reason": message})


def _unreachable(url: str, error: BaseException, timeout: float) -> OIDCError:
    split = urlsplit(url)
    where = f"{split.hostname}:{split.port or (443 if split.scheme == 'https' else 80)}"
    if isinstance(error, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return OIDCError(N_("{url} did not answer within {seconds} s; check the address, that the provider is up, "
                            "and any firewall between"), params={"url": url, "seconds": f"{timeout:g}"})
    if isinstance(error, aiohttp.ClientConnectorCertificateError | ssl.SSLCertVerificationError):
        return _certificate_problem(url, error)
    if isinstance(error, aiohttp.ClientConnectorDNSError):
        return OIDCError(N_("{host} is not a name this machine can resolve; check the issuer's address"),
                         params={"host": split.hostname or url})
    if isinstance(error, aiohttp.ClientSSLError | ssl.SSLError):
        reason = getattr(error, "os_error", error)  # aiohttp's own str() carries the SSL context's repr
        return OIDCError(N_("TLS with {host} failed: {reason}"),
                         params={"host": split.hostname or url, "reason": str(reason)})
    os_error = getattr(error, "os_error", None) or error
    if isinstance(os_error, ConnectionRefusedError) or getattr(os_error, "errno", None) == errno.ECONNREFUSED:
        return OIDCError(N_("{where} refused the connection; check the issuer's address and that the provider "
                            "is running"), params={"where": where})
    reason = connect_failure(error) if isinstance(error, aiohttp.ClientConnectorError) else str(error)
    return OIDCError(N_("{url} could not be reached: {reason}"), params={"url": url, "reason": reason})


async def get_json(session: aiohttp.ClientSession, url: str, timeout: float, what: str) -> dict[str, Any]:
    """The JSON object at `url`; `what` ("the discovery document", "the key set") names it in a refusal."""
    try:
        async with session.get(url, headers={"Accept": "application/json"}) as answer:
            body = await answer.content.read(_MAX_BODY + 1)
            status = answer.status
    except (TimeoutError, aiohttp.ClientError, OSError) as e:
        raise _unreachable(url, e, timeout) from None
    if status != 200:
        raise OIDCError(N_("{url} answered HTTP {status} for {what}; check the issuer's address (the part before "
                           "/.well-known/openid-configuration)"), params={"url": url, "status": status, "what": what})
    return parse_object(url, body, what)


def parse_object(url: str, body: bytes, what: str) -> dict[str, Any]:
    try:
        found = json.loads(body) if len(body) <= _MAX_BODY else None
    except ValueError:
        found = None
    if not isinstance(found, dict):
        raise OIDCError(N_("{url} did not answer {what} as a JSON object; the address is probably not an "
                           "OpenID provider's"), params={"url": url, "what": what})
    return found


async def post_form(session: aiohttp.ClientSession, url: str, form: dict[str, str], headers: dict[str, str],
                    timeout: float) -> tuple[int, dict[str, Any]]:
    """The token endpoint's status and JSON answer (an error's too: it says why in `error`)."""
    try:
        async with session.post(url, data=form, headers={"Accept": "application/json", **headers}) as answer:
            body = await answer.content.read(_MAX_BODY + 1)
            status = answer.status
    except (TimeoutError, aiohttp.ClientError, OSError) as e:
        raise _unreachable(url, e, timeout) from None
    return status, parse_object(url, body, "the token request")


def session(timeout: float, context: ssl.SSLContext | None = None) -> aiohttp.ClientSession:
    """A client for one exchange. `context`: None is the system's trust store, as for every outside service
    (a provider with a private CA is added there); tests give one that trusts their own CA."""
    connector = aiohttp.TCPConnector(ssl=context if context is not None else True)
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout), connector=connector, trust_env=False)
