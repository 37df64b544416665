"""`/prometheus/targets`: every machine of the cluster, for Prometheus's HTTP service discovery.

A site's Prometheus scrapes each machine's node exporter (network and disk
traffic, filesystems, CPU time) beside llmgw's own metrics. Listing the
machines by hand goes stale the day a node is added, so the control plane
lists them: the nodes it has heard of, the control planes and the store's
hosts, each once, in the shape Prometheus's `http_sd_configs` reads.

Every control plane answers the same list, read from the store, so the
same target asked of two of them is one target to Prometheus (it keys
targets by address and labels). The list is read again at most every
READ_EVERY seconds however often it is asked, and a store that does not
answer leaves the last list served: a scrape configuration must not
empty itself because the store blinked.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from llmgw.config import postgres_hosts
from llmgw.store import CatalogStore, TrustStore

log = logging.getLogger("llmgw.control.scrapetargets")

# prometheus-node-exporter's port, as Debian's package and `llmgw node add` install it.
NODE_EXPORTER_PORT = 9100
READ_EVERY = 30.0


@dataclass
class _Machine:
    host: str
    name: str
    roles: set[str] = field(default_factory=set)


def host_of(address: str) -> str:
    """The host of HOST:PORT, [V6]:PORT, HOST or a URL; "" for none."""
    address = address.strip()
    if "://" in address:
        address = address.split("://", 1)[1].split("/", 1)[0]
    if address.startswith("["):
        return address[1:address.find("]")] if "]" in address else ""
    if address.count(":") == 1:
        return address.split(":", 1)[0]
    return address


def _target(host: str) -> str:
    return f"[{host}]:{NODE_EXPORTER_PORT}" if ":" in host else f"{host}:{NODE_EXPORTER_PORT}"


class _Store(TrustStore, CatalogStore, Protocol):
    """What ScrapeTargets reads: the control planes' addresses and the nodes."""


class ScrapeTargets:
    """The machines of the cluster as Prometheus target groups, read from `store` (cached READ_EVERY seconds)."""

    def __init__(self, store: _Store, store_url: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._store_url = store_url
        self._clock = clock
        self._groups: list[dict[str, Any]] = []
        self._read_at: float | None = None

    async def groups(self) -> list[dict[str, Any]]:
        now = self._clock()
        if self._read_at is None or now - self._read_at >= READ_EVERY:
            try:
                self._groups = await self._read()
            except Exception as e:  # noqa: BLE001 - the store's failure must not empty a scrape configuration
                log.warning("the machines for /prometheus/targets were not read, the last list is served: %s", e)
            self._read_at = now
        return self._groups

    async def _read(self) -> list[dict[str, Any]]:
        machines: dict[str, _Machine] = {}

        def add(host: str, name: str, role: str) -> None:
            if not host:
                return
            machine = machines.setdefault(host, _Machine(host, name))
            machine.roles.add(role)

        for plane in await self._store.list_control_planes():
            add(host_of(plane.agent_address), plane.name, "control-plane")
        for host in postgres_hosts(self._store_url):
            add(host_of(host), host_of(host), "store")
        for node in await self._store.list_nodes():
            register = node.register or {}
            address = register.get("advertise") or (register.get("host") or {}).get("hostname", "")
            add(host_of(address), node.name or node.id, "node")
        return [{"targets": [_target(m.host)],
                 "labels": {"node": m.name, "llmgw_role": ",".join(sorted(m.roles))}}
                for m in sorted(machines.values(), key=lambda m: m.host)]
