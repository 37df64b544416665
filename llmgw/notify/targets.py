"""Where a webhook may be sent: never to loopback, link-local or metadata addresses, unless it was allowed.

A webhook's URL is given by an administrator and its deliveries are made by
the leader, inside the cluster's network: a URL at a cloud's metadata
service or at a listener of this machine would make llmgw post to what only
it should reach. The rule is the outside providers' (config/targets.py) and
so is its check: the name is judged when the webhook is added, and every
address it resolves to at each connection (router/targets.py's refusing
socket), whatever DNS says by then.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import aiohttp

from llmgw.config import host_refusal
from llmgw.errors import N_, ExpectedError
from llmgw.router import refusing_socket

ALLOW_HINT = "remove it and add it again with --allow-private if it really is there"


class NotifyError(ExpectedError):
    """A webhook refused or not found, as a sentence; `status` and `code` for the admin API."""

    def __init__(self, message: str, /, *, status: int = 400, code: str = "invalid_request",
                 params: dict[str, object] | None = None):
        super().__init__(message, params=params)
        self.status, self.code = status, code


def check_url(url: str, allow_private: bool) -> str:
    """The URL, checked as a webhook's: http(s), a host, and no refused address unless allowed."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise NotifyError(N_("a webhook's URL is http:// or https:// with a host, like https://ops.example.com/llmgw; "
                             "got {url}"), params={"url": url[:200]})
    if len(url) > 2000:
        raise NotifyError(N_("a webhook's URL is at most 2000 characters"))
    why = None if allow_private else host_refusal(parts.hostname)
    if why is not None:
        raise NotifyError(N_("{why}; a webhook is not sent there unless it is added with --allow-private"),
                          params={"why": why})
    return url


def sessions() -> tuple[aiohttp.ClientSession, aiohttp.ClientSession]:
    """(guarded, open): the session that refuses loopback, link-local and metadata addresses at each connection,
    and the one for webhooks added with --allow-private."""
    guarded = aiohttp.ClientSession(connector=aiohttp.TCPConnector(
        limit=32, ttl_dns_cache=60, socket_factory=refusing_socket("webhooks", ALLOW_HINT)))
    trusted = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=32, ttl_dns_cache=60))
    return guarded, trusted
