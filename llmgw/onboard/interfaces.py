"""Which of this machine's interfaces is on a floating address's network.

keepalived announces the address with VRRP multicast and gratuitous ARP,
which reach only the machine's own network segment: the interface must be
the one the kernel sends to the address through directly, never by way of
a gateway. Asked of iproute2 (`ip -j`), which every Debian machine has.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import subprocess
from collections.abc import Callable

from llmgw.onboard.keepalived import FloatingAddressError

Run = Callable[[list[str]], str]


def _ip(args: list[str]) -> str:
    try:
        done = subprocess.run(["ip", "-j", *args], capture_output=True, text=True, timeout=10)
    except FileNotFoundError:
        raise FloatingAddressError(
            "the ip command (iproute2) is not here to say which interface reaches the floating address; "
            "give --interface, or apt-get install iproute2") from None
    if done.returncode != 0:
        raise FloatingAddressError(done.stderr.strip() or f"ip {' '.join(args)} failed")
    return done.stdout


def interface_toward(vip: ipaddress.IPv4Interface, run: Run = _ip) -> str:
    """The interface that holds the route toward the floating address, or a sentence saying why none does."""
    ip = str(vip.ip)
    try:
        routes = json.loads(run(["route", "get", ip]) or "[]")
    except FloatingAddressError as e:
        raise FloatingAddressError(
            f"no route toward {ip} here ({e}); the floating address must be on a network this "
            "machine is on: choose one there, or give --interface") from None
    if not routes:
        raise FloatingAddressError(f"no route toward {ip} here; give --interface")
    route = routes[0]
    if route.get("type") == "local":
        # This machine holds the address already (keepalived put it here),
        # so the kernel answers "local, dev lo"; the interface is the one
        # carrying it.
        return _holder(vip, json.loads(run(["-4", "addr", "show"]) or "[]"))
    if route.get("gateway"):
        raise FloatingAddressError(
            f"{ip} is reached through the gateway {route['gateway']} from here, not on a network this machine "
            f"is on; a floating address must be on the control planes' own network (the one {route.get('dev')} "
            "is on, perhaps), or give --interface")
    return route["dev"]


def _holder(vip: ipaddress.IPv4Interface, links: list[dict]) -> str:
    in_network = []
    for link in links:
        for info in link.get("addr_info", []):
            if info.get("family") != "inet":
                continue
            held = ipaddress.ip_interface(f"{info['local']}/{info['prefixlen']}")
            if held.ip == vip.ip:
                return link["ifname"]
            if vip.ip in held.network:
                in_network.append(link["ifname"])
    if in_network:
        return in_network[0]
    raise FloatingAddressError(f"no interface here is on {vip.network}; give --interface")


def check_interface(name: str, names: Callable[[], list[str]] | None = None) -> str:
    """An interface named with --interface, if it is here and keepalived can use it."""
    here = names() if names else [n for _, n in socket.if_nameindex()]
    if name not in here:
        raise FloatingAddressError(f"there is no interface {name} here; there are {', '.join(sorted(here))}")
    if name == "lo":
        raise FloatingAddressError(
            "keepalived cannot hold a floating address on the loopback interface lo: nobody else would "
            "reach it; name the interface on the control planes' network")
    return name
