"""A listening port to hand to a process that binds it a moment later: a benchmark's or a test's server.

bind(0) draws from the kernel's ephemeral range (net.ipv4.ip_local_port_range),
the same range every outgoing connection on the machine takes its source port
from. Between our check and the server's own bind (a second or more, while it
starts) any connection may take the port, and the server then fails to
listen: CI saw exactly that, a control plane refusing to start because its
admin port had become some client's source port. Below the ephemeral range
only an explicit bind takes a port, and the check here sees those.

Not for a node's engines: `llmgw firewall on` closes the ephemeral range to
machines outside the cluster, and keeps its hands off every other port, so
engines stay in that range (llmgw/agent/shards.py).
"""

from __future__ import annotations

import random
import socket
from collections.abc import Callable

# Clear of the usual fixed listeners below it (PostgreSQL 5432, the 8000s and 9000s of web servers and exporters).
FIRST = 15000
LINUX_EPHEMERAL = (32768, 60999)
# Fewer than this many ports on one side of the ephemeral range is too few to draw from.
ENOUGH = 2000


def outside_ephemeral(range_file: str = "/proc/sys/net/ipv4/ip_local_port_range") -> tuple[int, int]:
    """[low, high): below the ephemeral range, or above it where below is too small."""
    try:
        with open(range_file) as f:
            eph_low, eph_high = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        eph_low, eph_high = LINUX_EPHEMERAL
    if eph_low - FIRST >= ENOUGH:
        return FIRST, eph_low
    if 65535 - eph_high >= ENOUGH:
        return eph_high + 1, 65536
    # The ephemeral range covers nearly everything: no port is safe from it, so draw from all of them.
    return 1024, 65536


def bindable(port: int, host: str = "127.0.0.1") -> bool:
    """Whether no socket holds the port on host now: a listener, a connection, or one in TIME_WAIT."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def unused_port(host: str = "127.0.0.1", *, also: Callable[[int], bool] = lambda port: True,
                draw: random.Random | None = None) -> int:
    """A port nothing holds on host, from outside the ephemeral range; `also` may pass one over (a lease)."""
    low, high = outside_ephemeral()
    start = (draw or random.SystemRandom()).randrange(low, high)
    for offset in range(high - low):
        port = low + (start - low + offset) % (high - low)
        if bindable(port, host) and also(port):
            return port
    raise OSError(f"no free port on {host} between {low} and {high - 1}")
