"""The three-machine store: etcd on all three, PostgreSQL 15 under Patroni on two or three, llmgw on all three.

Three machines, each a control plane. etcd runs on every one of them, so
its three members keep a quorum of two when any one machine is lost, and
Patroni keeps its leader key there. PostgreSQL runs under Patroni on the
machines that carry it (two at least: a primary and a standby to promote),
and every control plane's `store:` names all of them with
`target_session_attrs=read-write`, so llmgw writes to whichever is primary.

Rendering is pure: `etcd_environment`, `patroni_config` and `store_address`
take the machines and return text or a dict, so what each machine would be
given is testable (and shown in the plan) without writing anything.
`hastore.py` writes one machine's files under a Layout.

The timings, and why (docs/ha.md says the same for people):
- ttl 20 s: how long the leader key outlives a primary that stopped
  renewing it. The lower bound of an unplanned failover. Patroni's default
  is 30; 20 keeps a dead primary's writes failing for less time while still
  riding out a loop that ran long.
- loop_wait 5 s: how often each Patroni wakes to renew the key or look for
  a leader. A primary that died is noticed within one loop of the key's end.
- retry_timeout 5 s: how long etcd or PostgreSQL may fail to answer before
  the primary demotes itself. Patroni asks loop_wait + 2 * retry_timeout <=
  ttl (here 15 <= 20) so a primary cut off from etcd steps down before
  another can take the key: never two primaries.
- maximum_lag_on_failover 1 MiB: a standby further behind than this is not
  promoted; with synchronous mode it is the asynchronous third only.
- synchronous_mode on (not strict): a commit returns only once one standby
  has it, so a usage batch the gateway saw committed survives the primary's
  death. Not strict: when the standby is lost too, the primary writes alone
  rather than stopping the gateway.
- primary_start_timeout 0: a primary whose PostgreSQL crashed is not
  restarted in place for up to 300 s while clients wait; the standby is
  promoted at once.
- etcd's heartbeat 100 ms and election 1000 ms: its defaults, for machines
  on one network; a leader lost is replaced in about a second, well inside
  retry_timeout.

The failover test (tests/integration/test_store_failover.py) runs on the
files written here (tests/support/storemachines.py): no request failed and
no usage row was lost when the primary's PostgreSQL was killed.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmgw.errors import ExpectedError

SCOPE = "llmgw"
DATABASE = "llmgw"
APP_USER = "llmgw"
SUPERUSER = "postgres"
REPLICATION_USER = "replicator"
REST_USER = "patroni"
PG_VERSION = 15
BIN_DIR = f"/usr/lib/postgresql/{PG_VERSION}/bin"
# Not 15/main: Debian's postgresql package makes and starts a cluster called
# main on install; Patroni's is its own, beside it.
DATA_DIR = f"/var/lib/postgresql/{PG_VERSION}/llmgw"
PATRONI_CONFIG = "/etc/patroni/config.yml"  # what Debian's patroni.service runs
BOOTSTRAP_SCRIPT = "/etc/patroni/llmgw-bootstrap.sh"
APP_PASSWORD_FILE = "/etc/patroni/llmgw.password"  # noqa: S105 - the file's path
ETCD_ENVIRONMENT = "/etc/default/etcd"  # what Debian's etcd.service reads
# Not /var/lib/etcd/default: Debian's etcd-server starts a one-member etcd
# there on install, and a data directory that exists makes etcd ignore the
# three-member cluster it is given.
ETCD_DATA_DIR = "/var/lib/etcd/llmgw"
SOCKETS = "/var/run/postgresql"
SECRETS_DIR = "/etc/llmgw/store"

TTL, LOOP_WAIT, RETRY_TIMEOUT = 20, 5, 5
MAXIMUM_LAG_ON_FAILOVER = 1024 * 1024
ETCD_HEARTBEAT_MS, ETCD_ELECTION_MS = 100, 1000

_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


class StoreSetupError(ExpectedError):
    """Machines that cannot make a three-machine store as given, said as a sentence."""


@dataclass(frozen=True)
class StorePorts:
    postgres: int = 5432
    patroni: int = 8008
    etcd_client: int = 2379
    etcd_peer: int = 2380


@dataclass(frozen=True)
class StoreMachine:
    """One of the three: its name (etcd's and Patroni's member name), the address the others reach it at, and
    whether it carries PostgreSQL. Ports other than Debian's are for tests, which run three on loopback."""

    name: str
    address: str
    postgres: bool = True
    ports: StorePorts = field(default_factory=StorePorts)

    @property
    def ip(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
        return ipaddress.ip_address(self.address)

    def host(self, port: int) -> str:
        return f"[{self.address}]:{port}" if self.ip.version == 6 else f"{self.address}:{port}"

    def url(self, port: int) -> str:
        return f"http://{self.host(port)}"

    @property
    def one_address(self) -> str:
        """This machine alone, as pg_hba.conf writes it."""
        return f"{self.address}/{32 if self.ip.version == 4 else 128}"


@dataclass(frozen=True)
class StoreSecrets:
    """The store's three passwords. Never in a repr, a log or a message: only in the files that need them."""

    superuser: str = field(repr=False)
    replication: str = field(repr=False)
    app: str = field(repr=False)
    # Patroni's REST API answers GETs to anyone it lets in (health checks, the
    # other members); a switchover, restart or reinitialise needs this one.
    rest: str = field(repr=False)

    NAMES = ("superuser", "replication", "app", "rest")

    @classmethod
    def load_or_make(cls, folder: Path) -> StoreSecrets:
        """The passwords kept in `folder` (one NAME.password each, mode 0600), made once when missing.

        Made on the first machine and carried to the others with the rest of
        its files; run again, the same passwords are read back, so the
        configuration written again is the same."""
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        found = {}
        for name in cls.NAMES:
            path = folder / f"{name}.password"
            try:
                fd = _open_new(path)
            except FileExistsError:
                found[name] = path.read_text().strip()
                continue
            # URL-safe: llmgw's goes into the store's address as it is.
            made = secrets.token_urlsafe(24)
            with open(fd, "w") as f:
                f.write(made + "\n")
            found[name] = made
        return cls(found["superuser"], found["replication"], found["app"], found["rest"])


def _open_new(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)


def check_machines(machines: list[StoreMachine]) -> None:
    """Three machines with names and addresses that can make one store; else one sentence saying what to change."""
    if len(machines) != 3:
        raise StoreSetupError(
            f"the store needs three machines, given {len(machines)}: etcd keeps a quorum only with three "
            "members, so that any one machine can be lost")
    for m in machines:
        if not _NAME.match(m.name):
            raise StoreSetupError(
                f"{m.name!r} cannot name a store member; use lower-case letters, digits and '-', like cp-1")
        try:
            ipaddress.ip_address(m.address)
        except ValueError:
            raise StoreSetupError(
                f"{m.address!r} (for {m.name}) is not an IP address; give the address the other two reach it "
                "at, like 10.0.0.6: PostgreSQL lets in the three machines by address") from None
    names = [m.name for m in machines]
    if len(set(names)) != 3:
        raise StoreSetupError(f"the three machines need three names, given {', '.join(names)}")
    endpoints = [(m.address, port) for m in machines
                 for port in (m.ports.postgres, m.ports.patroni, m.ports.etcd_client, m.ports.etcd_peer)]
    if len(set(endpoints)) != len(endpoints):
        raise StoreSetupError("two of the machines share an address and a port; give each its own address")
    if sum(m.postgres for m in machines) < 2:
        raise StoreSetupError(
            "PostgreSQL must run on two of the three machines at least: a primary and a standby to promote "
            "when it is lost")


def _cluster_token(machines: list[StoreMachine]) -> str:
    """etcd's initial cluster token, from the members: two clusters on one network never take each other's peers."""
    digest = hashlib.sha256(",".join(f"{m.name}={m.host(m.ports.etcd_peer)}" for m in machines).encode())
    return f"llmgw-{digest.hexdigest()[:12]}"


def etcd_environment(machines: list[StoreMachine], me: StoreMachine, data_dir: str = ETCD_DATA_DIR) -> str:
    """/etc/default/etcd for one member, the file Debian's etcd.service reads: etcd takes ETCD_* as its flags."""
    check_machines(machines)
    clients = [me.url(me.ports.etcd_client)]
    loopback = f"http://127.0.0.1:{me.ports.etcd_client}"
    if loopback not in clients:
        clients.append(loopback)
    values = {
        "ETCD_NAME": me.name,
        "ETCD_DATA_DIR": data_dir,
        "ETCD_LISTEN_PEER_URLS": me.url(me.ports.etcd_peer),
        "ETCD_INITIAL_ADVERTISE_PEER_URLS": me.url(me.ports.etcd_peer),
        "ETCD_LISTEN_CLIENT_URLS": ",".join(clients),
        "ETCD_ADVERTISE_CLIENT_URLS": me.url(me.ports.etcd_client),
        "ETCD_INITIAL_CLUSTER": ",".join(f"{m.name}={m.url(m.ports.etcd_peer)}" for m in machines),
        "ETCD_INITIAL_CLUSTER_STATE": "new",
        "ETCD_INITIAL_CLUSTER_TOKEN": _cluster_token(machines),
        "ETCD_HEARTBEAT_INTERVAL": str(ETCD_HEARTBEAT_MS),
        "ETCD_ELECTION_TIMEOUT": str(ETCD_ELECTION_MS),
    }
    head = ("# Written by llmgw for the three-machine store; written whole again by the next install.\n"
            f"# Member {me.name} of {', '.join(m.name for m in machines)}: Patroni keeps its leader key here.\n"
            "# Plain http, so the firewall (llmgw firewall on) opens 2379 and 2380 to the cluster's networks only.\n")
    return head + "".join(f"{k}={v}\n" for k, v in values.items())


@dataclass(frozen=True)
class PatroniPaths:
    """Where one member's PostgreSQL files are, on the machine (a Layout puts them under its root)."""

    data_dir: str = DATA_DIR
    bin_dir: str = BIN_DIR
    sockets: str = SOCKETS
    bootstrap_script: str = BOOTSTRAP_SCRIPT

    @property
    def pgpass(self) -> str:
        return str(Path(self.data_dir).parent / "llmgw.pgpass")


def pg_hba(machines: list[StoreMachine]) -> list[str]:
    """Who may connect: Patroni's own superuser over the socket, then only the three machines, by password."""
    rules = ["local all postgres peer",
             "host all all 127.0.0.1/32 scram-sha-256",
             "host all all ::1/128 scram-sha-256"]
    for m in machines:
        if m.postgres:
            rules.append(f"host replication {REPLICATION_USER} {m.one_address} scram-sha-256")
    seen = {"127.0.0.1/32", "::1/128"}
    for m in machines:
        if m.one_address not in seen:
            seen.add(m.one_address)
            rules.append(f"host all all {m.one_address} scram-sha-256")
    return rules


def patroni_config(machines: list[StoreMachine], me: StoreMachine, secrets_: StoreSecrets,
                   paths: PatroniPaths | None = None) -> dict[str, Any]:
    """patroni.yml for one machine that carries PostgreSQL."""
    check_machines(machines)
    if not me.postgres:
        raise StoreSetupError(f"{me.name} carries no PostgreSQL, so it runs no Patroni; it runs etcd only")
    paths = paths or PatroniPaths()
    return {
        "scope": SCOPE,
        "name": me.name,
        "log": {"level": "INFO"},
        "restapi": {"listen": me.host(me.ports.patroni), "connect_address": me.host(me.ports.patroni),
                    "authentication": {"username": REST_USER, "password": secrets_.rest}},
        "etcd3": {"hosts": [m.host(m.ports.etcd_client) for m in machines]},
        "bootstrap": {
            "dcs": {
                "ttl": TTL,
                "loop_wait": LOOP_WAIT,
                "retry_timeout": RETRY_TIMEOUT,
                "maximum_lag_on_failover": MAXIMUM_LAG_ON_FAILOVER,
                "synchronous_mode": True,
                "primary_start_timeout": 0,
                "postgresql": {
                    # A former primary rejoins as a standby by rewinding what it
                    # wrote alone, rather than being copied again whole.
                    "use_pg_rewind": True,
                    "use_slots": True,
                    "parameters": {"max_connections": 200, "password_encryption": "scram-sha-256"},
                },
            },
            "initdb": [{"encoding": "UTF8"}, "data-checksums"],
            "pg_hba": pg_hba(machines),
            # Makes llmgw's role and database once, on the first primary.
            "post_bootstrap": paths.bootstrap_script,
        },
        "postgresql": {
            "listen": me.host(me.ports.postgres),
            "connect_address": me.host(me.ports.postgres),
            "data_dir": paths.data_dir,
            "bin_dir": paths.bin_dir,
            "pgpass": paths.pgpass,
            "authentication": {
                "superuser": {"username": SUPERUSER, "password": secrets_.superuser},
                "replication": {"username": REPLICATION_USER, "password": secrets_.replication},
            },
            "parameters": {"unix_socket_directories": paths.sockets},
            # A new standby's copy starts at once: pg_basebackup's default, a
            # spread checkpoint, kept one waiting 90 s on an idle primary.
            "basebackup": [{"checkpoint": "fast"}],
        },
        "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
    }


def bootstrap_script(password_file: str, psql: str = f"{BIN_DIR}/psql") -> str:
    """The post_bootstrap script: llmgw's role and database, made on the first primary.

    The password is read by psql itself from its file (`\\set pw \\`cat …\\``),
    never given on a command line, where any user could read it in ps.
    """
    return f"""#!/bin/sh
# Written by llmgw. Patroni runs it once, on the member that made the
# cluster, with a connection string as its argument.
set -eu
exec {psql} "$1" -v ON_ERROR_STOP=1 -q <<'SQL'
\\set pw `cat {password_file}`
CREATE ROLE {APP_USER} LOGIN PASSWORD :'pw';
CREATE DATABASE {DATABASE} OWNER {APP_USER};
SQL
"""


def store_address(machines: list[StoreMachine], secrets_: StoreSecrets) -> str:
    """The `store:` every control plane is given: every PostgreSQL host, writes to whichever is primary."""
    check_machines(machines)
    hosts = ",".join(m.host(m.ports.postgres) for m in machines if m.postgres)
    return f"postgresql://{APP_USER}:{secrets_.app}@{hosts}/{DATABASE}?target_session_attrs=read-write"
