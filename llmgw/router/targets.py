"""The connection to an outside provider, checked where it is made.

The settings are checked when they are written (config/targets.py), but a
name is only an address once it is resolved, and it can resolve to another
one tomorrow. So outside providers are sent through a session of their own
whose sockets are made by `guarded_socket`: it sees the very address about
to be connected to, after every resolution and cache, and refuses a
link-local, metadata or loopback one. A provider with `allow_private_targets`
is sent through the engines' session instead, as trusted as an engine.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable

import aiohttp

from llmgw.config import address_refusal

log = logging.getLogger("llmgw.upstream")



class TargetRefused(OSError):
    """A provider's address that outside providers may not be sent to."""


def refusing_socket(what: str, hint: str) -> Callable[[tuple], socket.socket]:
    """An aiohttp socket_factory that refuses a link-local, metadata or loopback address, whatever the name
    resolved to. `what` names whose URL it is in the refusal ("outside providers", "webhooks"); `hint` says,
    in the log, how to allow it. The notification webhooks use it too (llmgw/notify)."""

    # Each refused address is logged once per factory, i.e. per session (a router's, a webhook sender's):
    # once a module-wide set, where one session's refusal hid another's, in the log and in the tests.
    said: set[str] = set()

    def factory(addr_info: tuple) -> socket.socket:
        family, kind, proto, _, sockaddr = addr_info
        host = str(sockaddr[0])
        why = address_refusal(host)
        if why is not None:
            if host not in said and len(said) < 1000:
                said.add(host)
                log.error("a URL of %s led to a refused address: %s; it is not connected to (%s)", what, why, hint)
            raise TargetRefused(f"{why}; {what} are not connected to it")
        return socket.socket(family=family, type=kind, proto=proto)
    return factory


def guarded_socket() -> Callable[[tuple], socket.socket]:
    """aiohttp's socket_factory for outside providers: a socket, unless the address is refused."""
    return refusing_socket("outside providers",
                           "set the model's external.allow_private_targets: true if that provider really is there")


def providers_session() -> aiohttp.ClientSession:
    """The session outside providers are sent through (see the module's docstring)."""
    # As the engines' session (router/service.py): no pool limit, admission decides.
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60, ttl_dns_cache=300,
                                     socket_factory=guarded_socket())
    return aiohttp.ClientSession(connector=connector, auto_decompress=False, skip_auto_headers=("User-Agent",))
