"""Which addresses an outside provider's URL may reach.

An outside provider's URL is a cluster setting, shared through the store,
and the gateway sends it client requests with the provider's key. A URL
pointed at a cloud's metadata service, at a link-local address or at this
machine's own listeners turns a setting into a way to reach what only the
control plane should (issue 10: one client request delivered the master key
to a listener of ours). So, for outside providers:

- link-local addresses (169.254.0.0/16, fe80::/10) and the clouds' metadata
  addresses and names are refused;
- loopback (127.0.0.0/8, ::1) and the unspecified address (0.0.0.0, ::,
  which reach this machine) are refused: a model served on this machine is
  an engine, listed under `endpoints`, which is sent no key;
- private addresses (10/8, 172.16/12, 192.168/16, fc00::/7, 100.64/10) are
  allowed: companies run OpenAI-compatible proxies on their own networks;

unless the provider's `allow_private_targets` is true. The same rule is
applied to the name in the settings and, at connect time, to every address
the name resolves to (router/targets.py), so a name that resolves to a
refused address is refused too.

A host written as a number is read at add time the way the resolver reads it
at connect time (`numeric_address`): `127.1`, `2130706433`, `0x7f000001` and
`0177.0.0.1` all reach 127.0.0.1, and `0` reaches 0.0.0.0. Python's
ipaddress takes none of them, so they passed as names when the URL was
written and were refused only at the first connection, far from the
administrator who typed them (issue 25).
"""

from __future__ import annotations

import ipaddress
import socket

# Where the clouds answer for their instances' credentials. 169.254.169.254
# (AWS, Azure, GCP, Oracle, OpenStack) is link-local anyway; the others are not.
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",
    "169.254.170.2",    # AWS ECS task credentials
    "100.100.100.200",  # Alibaba Cloud
    "fd00:ec2::254",    # AWS over IPv6
    "fd20:ce::254",     # GCP over IPv6
))
METADATA_NAMES = frozenset((
    "metadata", "metadata.google.internal", "metadata.goog", "instance-data", "instance-data.ec2.internal",
    "metadata.azure.internal", "metadata.tencentyun.com", "localhost", "localhost.localdomain",
    "ip6-localhost", "ip6-loopback",
))


def _address(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(value.strip("[]").split("%")[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        # ::ffff:169.254.169.254 reaches 169.254.169.254.
        return address.ipv4_mapped
    return address


def numeric_address(host: str) -> str | None:
    """The address a host written as a number will be connected to, or None when it is a name.

    At connect time aiohttp's resolver calls getaddrinfo, which reads inet_aton's
    shorthand (`127.1`, one 32-bit number, hex and octal parts) as well as the
    dotted quad. Asking getaddrinfo itself, with AI_NUMERICHOST so that nothing is
    looked up, gives the address the connection would go to, by the same code."""
    try:
        found = socket.getaddrinfo(host, None, flags=socket.AI_NUMERICHOST)
    except (OSError, UnicodeError, ValueError):
        return None
    return str(found[0][4][0]) if found else None


def address_refusal(value: str, written: str | None = None) -> str | None:
    """Why an outside provider may not be reached at this address, or None when it may.

    `value` is an address as text; a name (not an address) is None here and
    is judged by `host_refusal` and, once resolved, by this again. `written`
    is how the administrator wrote it, when that differs, for the sentence."""
    address = _address(value)
    if address is None:
        return None
    if written is not None and written != value:
        value = f"{written} ({value})"
    if address in METADATA_ADDRESSES:
        return f"{value} is a cloud metadata address"
    if address.is_link_local:
        return f"{value} is a link-local address"
    if address.is_loopback or address.is_unspecified:
        return f"{value} is this machine (loopback)"
    if address.is_multicast or address.is_reserved:
        return f"{value} is not an address a provider can be reached at"
    return None


def host_refusal(host: str) -> str | None:
    """Why a URL's host may not be an outside provider's, as written in the settings, or None."""
    name = host.strip().rstrip(".").lower()
    if name in METADATA_NAMES or name.endswith(".localhost"):
        kind = "this machine (loopback)" if "localhost" in name or "loopback" in name else "a cloud metadata name"
        return f"{host} is {kind}"
    return address_refusal(numeric_address(name) or name, written=host)
