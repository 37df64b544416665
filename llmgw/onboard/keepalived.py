"""keepalived's configuration for a floating address that follows the leading control plane.

Every control plane runs keepalived with the same instance: the same
address and the same VRRP router id, each with its own interface and its
own `/leader` to ask. `/leader` is 200 only on the control plane that
leads, so the address is held where clients' requests can be served
without a hop, and moves within a few seconds of a change of leader.

Rendering is pure (`render`), so that what a control plane would be given
is testable without keepalived; `write` is the one place that touches the
file, and replaces only a file llmgw wrote.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import shutil
from dataclasses import dataclass

from llmgw.config import Address
from llmgw.errors import ExpectedError
from llmgw.files import write_atomic

DEFAULT_PATH = "/etc/keepalived/keepalived.conf"

# The first line of every file `write` makes; a file without it is someone
# else's (hand-written, or another cluster's) and is not replaced unasked.
MARK = "# Written by `llmgw server add --vip`."

# The check adds WEIGHT to a control plane's priority while /leader answers
# 200. Priorities are kept within PRIORITIES, whose spread (50) is less than
# WEIGHT, so the leader outranks every standby whatever priority each was
# given: the address cannot stay on a standby because it was set higher.
WEIGHT = 100
PRIORITIES = range(100, 151)
DEFAULT_PRIORITY = 100

_EXAMPLE = "like 10.0.0.160/24: the address, then its network's prefix length"


class FloatingAddressError(ExpectedError):
    """A floating address that cannot be set up as asked, said as a sentence."""


@dataclass(frozen=True)
class FloatingAddress:
    vip: ipaddress.IPv4Interface
    interface: str
    check_url: str
    priority: int = DEFAULT_PRIORITY

    @property
    def router_id(self) -> int:
        return router_id(self.vip)


def parse_vip(text: str) -> ipaddress.IPv4Interface:
    """The floating address as written on the command line, or a sentence saying what is wrong with it."""
    written = text.strip()
    if "/" not in written:
        raise FloatingAddressError(
            f"the floating address {written!r} has no prefix length; write it {_EXAMPLE} "
            "(keepalived adds it to the interface with that network)")
    try:
        vip = ipaddress.ip_interface(written)
    except ValueError:
        raise FloatingAddressError(f"{written!r} is not a floating address; write one {_EXAMPLE}") from None
    if vip.version != 4:
        # VRRP version 2, keepalived's default, carries IPv4 only; an IPv6
        # address needs an instance of its own under version 3.
        raise FloatingAddressError(f"{written} is an IPv6 address; a floating address here is IPv4, {_EXAMPLE}")
    ip = vip.ip
    if ip.is_loopback or ip.is_multicast or ip.is_unspecified or ip.is_link_local or ip.is_reserved:
        raise FloatingAddressError(
            f"{ip} cannot be a floating address: clients on the network could not reach it; "
            f"choose a free address on the control planes' network, {_EXAMPLE}")
    net = vip.network
    if net.prefixlen <= 30 and ip in (net.network_address, net.broadcast_address):
        which = "network's own address" if ip == net.network_address else "broadcast address"
        raise FloatingAddressError(
            f"{ip} is the {which} of {net}; choose a free address inside it, {_EXAMPLE}")
    return vip


def router_id(vip: ipaddress.IPv4Interface) -> int:
    """The VRRP router id for a floating address: from the address alone, 1 to 255.

    Every control plane of a cluster computes the same id without being
    told, and two clusters on one network with different addresses get
    different ids (one chance in 255 of a clash). keepalived reads an
    advertisement from another cluster with the same id as a fault. The
    prefix length is left out, so a control plane given /24 and another
    given /16 by mistake still agree on the id.
    """
    digest = hashlib.sha256(str(vip.ip).encode("ascii")).digest()
    return int.from_bytes(digest[:4], "big") % 255 + 1


def leader_url(client: Address) -> str:
    """Where this control plane answers /leader, from listen.client."""
    if client.all_interfaces:
        host = "127.0.0.1"
    elif ":" in client.host:
        host = f"[{client.host}]"
    else:
        host = client.host
    return f"http://{host}:{client.port}/leader"


def check_priority(priority: int) -> int:
    if priority not in PRIORITIES:
        raise FloatingAddressError(
            f"priority {priority} is outside {PRIORITIES.start} to {PRIORITIES.stop - 1}; within it the leader "
            f"always outranks a standby (the check adds {WEIGHT}), and the priority only chooses which "
            "standby keeps the address while none leads")
    return priority


def find_curl() -> str:
    """curl's full path: keepalived runs it every second to ask /leader."""
    found = shutil.which("curl")
    if not found:
        raise FloatingAddressError(
            "curl is not installed here, and keepalived runs it every second to ask this control plane "
            "whether it leads: apt-get install curl, then run this again")
    return os.path.realpath(found)


def render(address: FloatingAddress, curl: str = "/usr/bin/curl") -> str:
    """keepalived.conf for one control plane."""
    vip = address.vip
    return f"""{MARK}
# Run it again rather than editing here: it is written whole each time.
#
# The floating address {vip} follows whichever control plane leads. Every
# control plane runs keepalived with this instance: the same address and
# router id, its own interface and its own /leader. See docs/ha.md.

global_defs {{
    # Scripts run only when root owns them and every directory above them.
    # As root: keepalived 2.2.7 (Debian 12) kills its own configuration
    # check (keepalived -t) when a script runs as any other user (keepalived
    # issue 2617, fixed in 2.2.8), and the script only reads one URL.
    enable_script_security
    script_user root
}}

vrrp_script llmgw_leader {{
    # /leader is 200 only on the control plane that leads. curl rather
    # than a Python check: a few milliseconds a second instead of tens,
    # and one small package (apt-get install curl) where it is missing.
    script "{curl} -fsS --max-time 2 -o /dev/null {address.check_url}"
    # Asked every second; one answer makes a new leader's priority rise,
    # two missed take it away, so one slow answer does not move the address.
    interval 1
    timeout 3
    rise 1
    fall 2
    # Added to the priority while the check passes: more than any two
    # control planes' priorities differ, so the leader always outranks.
    weight {WEIGHT}
}}

vrrp_instance llmgw {{
    # BACKUP on every control plane and preemption on: the address goes to
    # the highest priority, which is the leader's. With nopreempt it would
    # stay wherever it first landed, on a standby, after the leader moved.
    state BACKUP
    interface {address.interface}
    # From the address ({vip.ip}), so every control plane of this cluster
    # agrees and another cluster's floating address has another id.
    virtual_router_id {address.router_id}
    priority {address.priority}
    advert_int 1
    track_script {{
        llmgw_leader
    }}
    virtual_ipaddress {{
        {vip}
    }}
}}
"""


def written_by_llmgw(path: str) -> bool:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.readline().rstrip("\n") == MARK


def write(path: str, text: str, force: bool = False) -> None:
    """Put the configuration at `path` whole, replacing only a file llmgw wrote unless forced.

    Written beside it and renamed over it, so keepalived reloading at that
    moment reads the old file or the new one, never half of one. 0644, as
    Debian leaves keepalived.conf: it carries no secret.
    """
    if os.path.exists(path) and not force and not written_by_llmgw(path):
        raise FloatingAddressError(
            f"{path} was not written by llmgw, and may hold addresses of its own; move it aside "
            "(or copy what it needs into the file this writes), or give --force to replace it")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, mode=0o755, exist_ok=True)
        write_atomic(path, text.encode("utf-8"), 0o644)
    except PermissionError:
        raise FloatingAddressError(f"cannot write {path}: permission denied; run it as root (sudo)") from None
