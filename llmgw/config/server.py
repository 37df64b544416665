"""server.yaml: a control plane's configuration.

It holds two kinds of keys. The machine's own (where its store is, what it
listens on, how it logs) are read from this machine's server.yaml at every
start. The cluster's settings (ClusterSettings: control, auth, router,
models) are the same on every control plane: they live in the store once
the cluster exists, change with `llmgw ctl config set`, and take effect
within seconds everywhere. In server.yaml they only seed a new store.

The string under each field is that key's documentation: docs/reference.md
is generated from it (llmgw/config/reference.py), so write it for the
person editing the file.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from llmgw.config.auth import LDAPSettings, OIDCSettings, SCIMSettings
from llmgw.config.guard import GuardSettings
from llmgw.config.hub import HubSettings
from llmgw.config.keyfiles import check_settings_key_files, own_secrets
from llmgw.config.loader import Invalid, load_file
from llmgw.config.mirror import MirrorSettings
from llmgw.config.notify import NotifySettings
from llmgw.config.router import CacheSettings, ModelSettings, RouterSettings
from llmgw.config.storeaddress import several_hosts_problem
from llmgw.config.telemetry import TelemetrySettings
from llmgw.config.types import Address, AddressOrOff, Duration, describe
from llmgw.errors import N_

__all__ = [
    "AuthSettings",
    "CacheSettings",
    "ClusterSettings",
    "ControlSettings",
    "CLUSTER_KEYS",
    "Listen",
    "LogSettings",
    "MACHINE_KEYS",
    "ModelSettings",
    "PresetSettings",
    "RouterSettings",
    "ServerConfig",
    "cluster_keys_in",
    "cluster_part",
    "load_server_config",
]

# Where a control plane's server.yaml is when --config does not say: read by
# `llmgw server` and by the admin client, which finds the admin API through it.
SYSTEM_CONFIG = "/etc/llmgw/server.yaml"
DEFAULT_LEASE_TTL = Duration("10s")
# The cluster's settings are promised to be in force on every control plane
# "within seconds"; a poll slower than this would break that promise.
MAX_SETTINGS_POLL = Duration("5s")


@dataclass(frozen=True)
class LogSettings:
    level: Literal["debug", "info", "warning", "error"] = "info"
    """The least severe messages written to the log. `debug` is for chasing a problem; it writes a line for every
    request."""

    format: Literal["text", "json"] = "text"
    """How each log line is written: `text` for people reading the journal, `json` for a log collector."""


@dataclass(frozen=True)
class ControlSettings:
    lease_ttl: Duration = DEFAULT_LEASE_TTL
    """How long the leader's lease lasts without being renewed; a standby takes over once it lapses.
    Long enough to ride out a slow query, short enough that a failover is over before anyone reads the alert. 0 takes
    the default, 10s."""

    settings_poll: Duration = Duration("2s")
    """How often each control plane looks in the store for changed cluster settings, so a change is in force everywhere
    within this and a moment more.
    More than 0 and at most 5s."""

    node_lost_after: Duration = Duration("30s")
    """How long a node may go unheard before it counts as lost and the leader places its replicas on other nodes.
    A node that comes back within it keeps them. At least 5s."""

    startup_timeout: Duration = Duration("10m")
    """How long a replica's start may make no progress before it is given up and placed again. Counted from the
    download's last progress, so a large download is not a failed start."""

    def __post_init__(self) -> None:
        # float(): a Duration is a float, but the checker reads Duration == 0 as never true.
        if float(self.lease_ttl) == 0:
            # "0 takes the default" is kept as the value itself, so everything
            # that reads the lease sees one number.
            object.__setattr__(self, "lease_ttl", DEFAULT_LEASE_TTL)

    def validate(self) -> None:
        if self.node_lost_after < 5:
            raise Invalid("node_lost_after", N_('must be at least 5s, got {value}: a node is heard from every 5 '
                                                'seconds'), params={"value": self.node_lost_after})
        if self.startup_timeout < 10:
            raise Invalid("startup_timeout", N_('must be at least 10s, got {value}'),
                                             params={"value": self.startup_timeout})
        if not 0 < self.settings_poll <= MAX_SETTINGS_POLL:
            raise Invalid(
                "settings_poll",
                N_("must be more than 0 and at most {most}, got {settings_poll}; the cluster's settings must reach "
                   'every control plane within seconds'),
                params={"most": MAX_SETTINGS_POLL, "settings_poll": self.settings_poll}
            )


PORTAL_LANGUAGES = ("en", "tr")


@dataclass(frozen=True)
class SignupSettings:
    domains: list[str] = field(default_factory=list)
    """E-mail domains whose people may make their own portal account (example.com). Empty: no sign-up;
    an administrator adds people."""

    project: str = "Default/default/default"
    """The ORG/TEAM/PROJECT that people who sign up become members of."""

    def validate(self) -> None:
        for i, domain in enumerate(self.domains):
            if not domain or "@" in domain or domain != domain.strip().lower() or "." not in domain:
                raise Invalid(f"domains[{i}]", N_('"{domain}" is not a domain in lower case, such as example.com'),
                                               params={"domain": domain})
        parts = self.project.split("/")
        if len(parts) != 3 or not all(parts):
            raise Invalid("project", N_('"{project}" is not ORG/TEAM/PROJECT'), params={"project": self.project})


@dataclass(frozen=True)
class AuthSettings:
    cache_ttl: Duration = Duration("5s")
    """How long a control plane trusts its cached copy of an API key before reading it from the store again.
    A key revoked on another control plane is refused here within this; 0 reads the store for every request."""

    max_key_ttl: Duration = Duration(0)
    """The longest lifetime a new API key may be given. When set, a key created without `--ttl` gets this lifetime.
    0 is no limit."""

    unknown_key_rate: int = 20
    """How many unknown API keys one client address may try in a minute before its requests are refused for a while.
    Enough for someone fixing a typo, too few for guessing keys."""

    signup: SignupSettings = field(default_factory=SignupSettings)
    """Who may make their own portal account, and where they land."""

    session_idle: Duration = Duration("2h")
    """A portal session unused this long ends; the person signs in again."""

    session_max: Duration = Duration("12h")
    """A portal session ends this long after its sign-in, however busy."""

    sign_in_per_account: int = 10
    """How many failed portal sign-ins one e-mail may have within `sign_in_window` before further tries are refused."""

    sign_in_per_address: int = 50
    """How many failed portal sign-ins one client address may have within `sign_in_window` before it is refused.
    Higher than per account: an office behind one address has many people."""

    sign_in_window: Duration = Duration("15m")
    """How far back failed sign-ins count; a refused account or address may try again once its failures are older."""

    oidc: OIDCSettings = field(default_factory=OIDCSettings)
    """Single sign-on through an OpenID Connect provider (Keycloak, Entra ID, Okta…): docs/sign-in.md."""

    ldap: LDAPSettings = field(default_factory=LDAPSettings)
    """Sign-in against an LDAP directory or Active Directory, kept in step by a sync: docs/sign-in.md."""

    scim: SCIMSettings = field(default_factory=SCIMSettings)
    """SCIM 2.0 provisioning at /scim/v2: a provider makes, changes and removes accounts."""

    break_glass: str = "admin@localhost"
    """The one account that keeps signing in with its password when `oidc.no_passwords` is on:
    the way in while the provider is down. No directory (OIDC, LDAP, SCIM) ever ties, renames,
    suspends, demotes or deletes it."""

    def validate(self) -> None:
        if self.unknown_key_rate < 1:
            raise Invalid("unknown_key_rate", N_('must be at least 1, got {value}'),
                                              params={"value": self.unknown_key_rate})
        for key in ("session_idle", "session_max", "sign_in_window"):
            if float(getattr(self, key)) <= 0:
                raise Invalid(key, N_("must be longer than 0, got {value}"), params={"value": getattr(self, key)})
        if float(self.session_max) < float(self.session_idle):
            raise Invalid("session_max", N_('must be at least session_idle ({session_idle}), got {session_max}'),
                                         params={"session_idle": self.session_idle, "session_max": self.session_max})
        for key in ("sign_in_per_account", "sign_in_per_address"):
            if getattr(self, key) < 1:
                raise Invalid(key, N_("must be at least 1, got {value}"), params={"value": getattr(self, key)})


@dataclass(frozen=True)
class PortalSettings:
    language: str = "en"
    """The portal's language for a browser whose Accept-Language names none it has (en, tr),
    until the person picks one."""

    address: str = ""
    """The gateway's address as the portal's snippets show it (https://llm.example.com).
    Empty: the address the browser used, for the snippets only; single sign-on does not start without
    it (or auth.oidc.redirect_url), since a browser's Host header can name any address."""

    def validate(self) -> None:
        if self.language not in PORTAL_LANGUAGES:
            raise Invalid("language", N_("{language} is not one of the portal's languages ({languages})"),
                                      params={"language": self.language, "languages": ', '.join(PORTAL_LANGUAGES)})
        if self.address and not self.address.startswith(("http://", "https://")):
            raise Invalid("address", N_('{address} must start with http:// or https://'),
                                     params={"address": self.address})


_PRESET_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class PresetSettings:
    auto: bool = True
    """The leading control plane adds one of llmgw's own models (`llmgw ctl model presets`) where a node offers
    ComfyUI with a card that fits it and the catalog makes nothing of that kind yet; on demand, so nothing is
    fetched until somebody asks for it. Looked at every 30 seconds (docs/media.md, "Presets")."""

    declined: list[str] = field(default_factory=list)
    """Presets not to add again: a preset's model removed from the catalog is put here. `llmgw ctl model presets add
    NAME` takes one off and adds it."""

    def validate(self) -> None:
        seen: set[str] = set()
        for i, name in enumerate(self.declined):
            if not _PRESET_NAME.match(name):
                raise Invalid(f"declined[{i}]", N_("{name} is not a preset's name, such as flux-schnell"),
                              params={"name": describe(name)})
            if name in seen:
                raise Invalid(f"declined[{i}]", N_("{name} is given twice"), params={"name": name})
            seen.add(name)


@dataclass(frozen=True)
class ClusterSettings:
    """The cluster's settings: the same on every control plane, kept in the store once the cluster exists."""

    control: ControlSettings = field(default_factory=ControlSettings)
    """Leadership among the control planes, and how fast settings changes spread."""

    auth: AuthSettings = field(default_factory=AuthSettings)
    """API keys and portal sign-in: caching, lifetimes, sessions, sign-up, and how guessing is slowed down."""

    router: RouterSettings = field(default_factory=RouterSettings)
    """The client API's routing of requests to the models."""

    models: list[ModelSettings] = field(default_factory=list)
    """Models served from engines listed here, each with the keys below."""

    guard: GuardSettings = field(default_factory=GuardSettings)
    """Guardrails: policies that read prompts and answers, and where they apply."""

    portal: PortalSettings = field(default_factory=PortalSettings)
    """The web portal on the client port: its default language and the address its snippets show."""

    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    """Traces of requests and of replica starts, sent to an OpenTelemetry collector (docs/observability.md)."""
    notify: NotifySettings = field(default_factory=NotifySettings)
    """The notification webhooks' retries (the webhooks themselves: `llmgw ctl webhooks`, docs/webhooks.md)."""

    hub: HubSettings = field(default_factory=HubSettings)
    """Models added from Hugging Face: the hub asked to pin them, its token, and the publishers trusted
    (docs/models.md, "From Hugging Face")."""

    mirror: MirrorSettings = field(default_factory=MirrorSettings)
    """The model mirrors the nodes fetch from instead of Hugging Face, kept in step with the catalog's pins
    (docs/mirror.md)."""

    presets: PresetSettings = field(default_factory=PresetSettings)
    """llmgw's own picture models and whether the leader adds them where a node fits one (docs/media.md,
    "Presets")."""

    def validate(self) -> None:
        first: dict[str, int] = {}
        for i, model in enumerate(self.models):
            if model.name in first:
                raise Invalid(
                    f"models[{i}].name",
                    N_('{name} is already the name of models[{first}]; each model needs its own'),
                    params={"name": model.name, "first": first[model.name]}
                )
            first[model.name] = i
        for i, model in enumerate(self.models):
            for j, other in enumerate(model.fallbacks):
                if other not in first:
                    raise Invalid(f"models[{i}].fallbacks[{j}]", N_('{other} is not one of the models'),
                                                                 params={"other": other})


@dataclass(frozen=True)
class Listen:
    client: Address = Address(":8080")
    """Where clients reach the OpenAI-compatible API, the portal and /health. Put TLS in front of it in production."""

    agent: Address = Address(":7443")
    """Where agents and the other control planes connect, over mutual TLS with the cluster's certificates."""

    admin: Address = Address("127.0.0.1:9090")
    """The admin API used by `llmgw ctl` on this machine, behind the admin token.
    Loopback only unless `admin_allow_remote` is true."""

    metrics: AddressOrOff = AddressOrOff(":9091")
    """Where Prometheus scrapes /metrics, or `off`."""

    def validate(self) -> None:
        named = [(k, getattr(self, k)) for k in ("client", "agent", "admin", "metrics")]
        for i, (key, addr) in enumerate(named):
            if addr.off or addr.port == 0:
                continue
            for other_key, other in named[:i]:
                if other.off or other.port != addr.port:
                    continue
                if addr.host == other.host or addr.all_interfaces or other.all_interfaces:
                    raise Invalid(key, N_('{addr} takes the same port as listen.{other_key} ({other}); each listener '
                                          'needs its own'),
                                       params={"addr": addr, "other_key": other_key, "other": other})


# Each worker is a whole router (its own engine connections, usage writer and
# store connection); past a machine's cores more of them only add those.
MAX_WORKERS = 64

_STORE_FORMS = "sqlite:/path/to/llmgw.db or postgresql://user@host/llmgw"


@dataclass(frozen=True)
class ServerConfig(ClusterSettings):
    """A control plane's server.yaml: the cluster's settings, then this machine's own keys."""

    name: str = ""
    """This control plane's name, as the console and the other control planes show it. Empty is the host name."""

    store: str = ""
    """Where the cluster's state is kept: `sqlite:PATH` for a single control plane, or `postgresql://…` for several
    sharing one store. Empty is `sqlite:` with llmgw.db in `data_dir` (/var/lib/llmgw/llmgw.db by default).
    Under Patroni, list every member and ask for the primary:
    `postgresql://llmgw:PASSWORD@10.0.0.6:5432,10.0.0.7:5432/llmgw?target_session_attrs=read-write` (docs/store.md)."""

    data_dir: str = "/var/lib/llmgw"
    """Where this machine keeps its own files: the admin token, certificates and the SQLite store by default."""

    admin_token_file: str = ""
    """The file holding the token `llmgw ctl` presents to the admin API. Empty is admin-token in `data_dir`."""

    advertise: str = ""
    """The address other control planes and clients reach this one's client API at, when it is not what this machine can
    see for itself (behind NAT or a load balancer).
    Empty is worked out from `listen.client` and the host's address."""

    listen: Listen = field(default_factory=Listen)
    """The addresses this control plane listens on."""

    admin_allow_remote: bool = False
    """Allow `listen.admin` on an address other machines can reach. The admin API is guarded by its token, but it is
    meant for this machine's own `llmgw ctl`."""

    firewall_networks: list[str] = field(default_factory=list)
    """The cluster's networks, as CIDR (10.0.0.0/24, fd00::/64): what `llmgw firewall on` opens this machine's agent,
    metrics and store ports to, and nothing else. Empty is the networks this machine is on (docs/firewall.md)."""

    log: LogSettings = field(default_factory=LogSettings)
    """What this control plane writes to its log."""

    workers: int = 1
    """How many processes serve the client API on this machine, each with its own event loop and all on `listen.client`
    (SO_REUSEPORT: the kernel spreads the connections). One process answers from one core; set about one worker per core
    the gateway may use.
    With more than 1, this process keeps the lease, the admin API, the agent and metrics ports and restarts a worker
    that dies. Rate limits and budgets hold across the workers: requests a minute exactly (each worker admits only
    what the main process lends it of a key's minute), tokens a minute and budgets by counts exchanged every 100 ms,
    so a key spread over them may pass those by what they answer in those 100 ms. From 1 to 64."""

    def __post_init__(self) -> None:
        if not self.store.strip():
            # The SQLite store is one of this machine's files, so it follows data_dir: a default
            # fixed to /var/lib/llmgw made `server init` with only data_dir set write there (issue 10).
            object.__setattr__(self, "store", "sqlite:" + os.path.join(self.data_dir, "llmgw.db"))

    @property
    def admin_token_path(self) -> str:
        return self.admin_token_file or os.path.join(self.data_dir, "admin-token")

    @property
    def machine_name(self) -> str:
        return self.name or socket.gethostname()

    def validate(self) -> None:
        super().validate()
        # Here, where this machine's own secrets are known; the store's settings are checked
        # again where they are written (control/settings.py) and each key file where it is read.
        check_settings_key_files(self, own_secrets(self))
        store = self.store.strip()
        if store.startswith("sqlite:"):
            if not store[len("sqlite:") :].strip():
                raise Invalid("store", N_('the sqlite: store needs a file after it; expected {forms}'),
                                       params={"forms": _STORE_FORMS})
        elif not store.startswith(("postgresql://", "postgres://")):
            raise Invalid("store", N_('expected {forms}, got {store}'),
                                   params={"forms": _STORE_FORMS, "store": describe(self.store)})
        else:
            problem = several_hosts_problem(store)
            if problem:
                # This machine's own key, said in English for now.
                raise Invalid("store", N_("{problem}"), params={"problem": problem})
        check_networks(self.firewall_networks)
        if not 1 <= self.workers <= MAX_WORKERS:
            raise Invalid("workers", N_('must be from 1 to {most}, got {workers}'),
                                     params={"most": MAX_WORKERS, "workers": self.workers})
        if not self.admin_allow_remote and not self.listen.admin.is_loopback:
            raise Invalid(
                "listen.admin",
                N_("{admin} can be reached from other machines; the admin API is for this machine's own llmgw ctl, "
                   'so listen on 127.0.0.1, or set admin_allow_remote: true if it must be reached from elsewhere'),
                params={"admin": self.listen.admin}
            )


def check_networks(networks: list[str]) -> None:
    """firewall_networks: each a network in CIDR or one address, as the firewall will read it."""
    for i, text in enumerate(networks):
        try:
            ipaddress.ip_network(str(text).strip(), strict=False)
        except ValueError:
            raise Invalid(f"firewall_networks[{i}]",
                          N_("{network} is not a network; write one like 10.0.0.0/24 or fd00::/64"),
                          params={"network": describe(text)}) from None


CLUSTER_KEYS: tuple[str, ...] = tuple(f.name for f in fields(ClusterSettings))
# The keys server.yaml holds for its own machine; every other key is the cluster's.
MACHINE_KEYS: tuple[str, ...] = tuple(f.name for f in fields(ServerConfig) if f.name not in CLUSTER_KEYS)


def cluster_part(cfg: ServerConfig) -> ClusterSettings:
    """The cluster's settings out of a server.yaml, as they would seed a new store."""
    return ClusterSettings(**{k: getattr(cfg, k) for k in CLUSTER_KEYS})


def cluster_keys_in(raw: dict[str, Any] | None) -> list[str]:
    """The cluster's top-level keys that a parsed server.yaml sets itself, in the order they are documented.

    Once the store exists these are not read from the file; the caller can
    say so rather than let a person wonder why an edit did nothing.
    """
    if not raw:
        return []
    return [k for k in CLUSTER_KEYS if k in raw]


def load_server_config(path: str | None) -> ServerConfig:
    """server.yaml at `path`, or every default when there is none to read."""
    if path is None:
        return ServerConfig()
    return load_file(ServerConfig, path)

