"""Who the client is: the address its unknown keys and connections are counted against.

Behind a load balancer every connection comes from the balancer, so the
socket's address names the balancer for every client, and one client's
made-up keys locked all of them out (issue 10). The balancer names the
client in X-Forwarded-For, but any client can write that header too, so it
is believed only from a peer in `router.trusted_proxies`, and only as far as
trusted hops vouch for it: read from the right (each hop appends the address
it was called from), the first address that is not a trusted proxy is the
client. A client's own X-Forwarded-For lies to the left of what the
balancer appended and is never reached.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from functools import lru_cache

from aiohttp import web

CLIENT = "llmgw.client"  # the request's client address, worked out once
_Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse(text: str) -> _Address | None:
    """An address as a peer or a proxy writes it ("10.0.0.7", "10.0.0.7:5123", "[::1]:80"), or None."""
    text = text.strip()
    if text.startswith("["):
        text = text[1:text.find("]")] if "]" in text else ""
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]  # IPv4 with a port, as some balancers write it
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped  # a dual-stack socket's view of an IPv4 peer
    return address


class TrustedProxies:
    """The proxies whose X-Forwarded-For is believed (`router.trusted_proxies`)."""

    def __init__(self, entries: Sequence[str]):
        # Checked when the settings were loaded; an entry that slipped through trusts nobody.
        self._networks = []
        for entry in entries:
            try:
                self._networks.append(ipaddress.ip_network(entry.strip(), strict=False))
            except ValueError:
                continue

    def trusts(self, address: _Address | None) -> bool:
        return address is not None and any(address in network for network in self._networks)

    def client(self, peer: str | None, forwarded: Iterable[str] = ()) -> str:
        """The client's address for a connection from `peer` with these X-Forwarded-For values.

        A header a trusted hop garbled stops the walk at the last address a
        trusted hop vouched for (the peer itself when it is the first), rather
        than guessing past it.
        """
        current = parse(peer or "")
        if current is None:
            return peer or "-"
        if not self.trusts(current):
            return str(current)
        hops = [hop for value in forwarded for hop in value.split(",")]
        for hop in reversed(hops):
            address = parse(hop)
            if address is None:
                break
            current = address
            if not self.trusts(current):
                break
        return str(current)


@lru_cache(maxsize=8)
def proxies(entries: tuple[str, ...]) -> TrustedProxies:
    """One parse per distinct setting, not one per request."""
    return TrustedProxies(entries)


def client_address(request: web.Request, trusted: Sequence[str]) -> str:
    """The request's client address, worked out on first use and kept on the request."""
    known = request.get(CLIENT)
    if known is None:
        known = request[CLIENT] = proxies(tuple(trusted)).client(
            request.remote, request.headers.getall("X-Forwarded-For", ()))
    return known
