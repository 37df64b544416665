"""The model mirror: mirror.yaml, read by `llmgw mirror serve`, and the cluster's `mirror` settings.

mirror.yaml is the mirror machine's own (where it keeps files, whom it keeps in step with). The cluster's settings
(server.yaml's `mirror`, live through `llmgw ctl config set`) say which mirrors the control planes and nodes use.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from llmgw.config.loader import Invalid, load_file
from llmgw.config.types import Address, Duration, describe
from llmgw.errors import N_

__all__ = ["MirrorConfig", "MirrorSettings", "MirrorTls", "check_mirror_url", "load_mirror_config"]


def check_mirror_url(key: str, value: str) -> None:
    parts = urlsplit(value)
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.path not in ("", "/"):
        raise Invalid(key, N_("expected a mirror's address like https://10.0.0.9:8600, got {value}"),
                      params={"value": describe(value)})


@dataclass(frozen=True)
class MirrorSettings:
    url: str = ""
    """The model mirror's address (https://10.0.0.9:8600). Set, every model pinned from Hugging Face is kept there
    and the nodes fetch from it and never from the internet (docs/mirror.md). Empty: each node fetches its own
    copy from `weights.hf_endpoint`."""

    peers: list[str] = field(default_factory=list)
    """A second mirror kept in step with the first (its address). The control planes read both and give a node the
    file on whichever answers."""

    read_every: Duration = Duration("10s")
    """How often each control plane reads each mirror (what it holds, how far its downloads are) and the leader
    tells it the catalog's pins: how soon a model added is fetched into the mirror, and a mirror that stopped
    answering is passed over. At least 1s."""

    def validate(self) -> None:
        if self.read_every < 1:
            raise Invalid("read_every", N_("must be at least 1s, got {value}"), params={"value": self.read_every})
        if self.url:
            check_mirror_url("url", self.url)
        for i, peer in enumerate(self.peers):
            check_mirror_url(f"peers[{i}]", peer)

    @property
    def addresses(self) -> list[str]:
        """Every mirror named, the first first, each once."""
        return list(dict.fromkeys(u.rstrip("/") for u in [self.url, *self.peers] if u))


@dataclass(frozen=True)
class MirrorTls:
    cert_file: str = ""
    """The mirror's certificate, from the cluster CA. Empty is this machine's control plane's (tls/agent-port.crt
    in `data_dir`), which names the machine's addresses."""

    key_file: str = ""
    """Its key. Empty is tls/agent-port.key in `data_dir`."""

    ca_file: str = ""
    """The cluster CA's certificate, which every client's must come from. Empty is tls/ca.crt in `data_dir`."""


@dataclass(frozen=True)
class MirrorConfig:
    """The mirror's mirror.yaml."""

    listen: Address = Address(":8600")
    """Where nodes, control planes and the other mirror reach this one, over mutual TLS with the cluster's
    certificates."""

    dir: str = "/var/cache/llmgw/mirror"
    """Where the mirror keeps the files, and its list of them (holdings.json). Put it on the largest disk."""

    data_dir: str = "/var/lib/llmgw"
    """The data directory of this machine's control plane, whose certificate the mirror uses (`tls` says otherwise)."""

    hub_endpoint: str = "https://huggingface.co"
    """The Hugging Face hub the mirror fetches from, the one machine that reaches it."""

    hub_token_file: str = ""
    """A file holding a Hugging Face token, for gated and private repositories; read at each fetch."""

    peers: list[str] = field(default_factory=list)
    """The other mirror's address (https://10.0.0.7:8600), read every `peer_interval`: what it has that this one
    lacks is copied, checked, and what it removed is removed here."""

    peer_interval: float = 30.0
    """Seconds between two reads of each peer."""

    fetch_at_once: int = 2
    """Files fetched from the hub at the same time."""

    tls: MirrorTls = field(default_factory=MirrorTls)
    """The certificates the mirror serves and dials with."""

    def validate(self) -> None:
        if not self.dir:
            raise Invalid("dir", N_("expected the folder the mirror keeps its files in"))
        for i, peer in enumerate(self.peers):
            check_mirror_url(f"peers[{i}]", peer)
        if not self.hub_endpoint.startswith(("http://", "https://")):
            raise Invalid("hub_endpoint", N_("expected an http:// or https:// address, got {value}"),
                          params={"value": describe(self.hub_endpoint)})
        if self.peer_interval < 1:
            raise Invalid("peer_interval", N_("expected at least 1 second, got {value}"),
                          params={"value": describe(self.peer_interval)})
        if not 1 <= self.fetch_at_once <= 16:
            raise Invalid("fetch_at_once", N_("expected 1 to 16, got {value}"),
                          params={"value": describe(self.fetch_at_once)})

    def tls_files(self) -> tuple[str, str, str]:
        """(certificate, key, CA) the mirror serves and dials with."""
        tls_dir = os.path.join(self.data_dir, "tls")
        return (self.tls.cert_file or os.path.join(tls_dir, "agent-port.crt"),
                self.tls.key_file or os.path.join(tls_dir, "agent-port.key"),
                self.tls.ca_file or os.path.join(tls_dir, "ca.crt"))


def load_mirror_config(path: str | None) -> MirrorConfig:
    """mirror.yaml at `path`, or every default when there is none to read."""
    if path is None:
        return MirrorConfig()
    return load_file(MirrorConfig, path)
