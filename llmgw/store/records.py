"""The rows the store keeps, as plain dataclasses.

Times are seconds since the epoch (float) in every dialect, so SQLite and
PostgreSQL hand back the same values. Money is whole micro-units of the
site's currency (int): budgets and costs are added up many times a second,
and floats would drift.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ROLES = ("admin", "operator", "billing", "viewer", "member")
SCOPES = ("org", "team", "project", "key")
PERIODS = ("day", "month")
VIAS = ("api", "cli", "console", "portal", "system")


@dataclass
class Person:
    id: str
    email: str
    name: str
    role: str = "member"
    password_hash: str | None = None
    created_at: float = 0.0
    disabled: bool = False
    locale: str | None = None  # "en" | "tr"; None: from the browser's Accept-Language
    must_change_password: bool = False  # set by a reset: the portal asks for a new one first
    password_changed_at: float | None = None
    # Who suspended them: "admin" by hand, or the directory ("ldap", "scim") that did; None while active.
    suspended_by: str | None = None


@dataclass(frozen=True)
class Identity:
    """A person as a directory knows them: `subject` is its immutable id (OIDC issuer|sub,
    LDAP objectGUID/entryUUID, SCIM externalId), so a renamed person is the same account."""

    source: str  # oidc | ldap | scim
    subject: str
    person_id: str
    created_at: float
    seen_at: float


@dataclass(frozen=True)
class Session:
    """A portal sign-in. `id` is the sha256 hex of the cookie's token, never the token;
    `chat_digest` the sha256 of the chat credential derived from it."""

    id: str
    person_id: str
    created_at: float
    last_seen_at: float
    expires_at: float  # the absolute end; the idle end is last_seen_at + auth.session_idle
    chat_digest: bytes
    address: str = ""
    agent: str = ""


@dataclass(frozen=True)
class Membership:
    """A person's place in the tree: an org's or a team's covers every project below it."""

    person_id: str
    scope: str  # org | team | project
    scope_id: str
    created_at: float = 0.0
    given_by: str | None = None  # None by hand; the directory ("oidc", "ldap", "scim") whose group gave it
    administers: bool = False  # an org's or a team's administrator (issue 31, llmgw.account.scope)


@dataclass(frozen=True)
class PersonToken:
    """A person's own token for the admin API: only its sha256 is kept, and the prefix shown to tell them apart."""

    id: str
    person_id: str
    digest: bytes
    prefix: str
    created_at: float
    last_used_at: float | None = None
    revoked_at: float | None = None


@dataclass
class Org:
    id: str
    name: str
    created_at: float = 0.0


@dataclass
class Team:
    id: str
    org_id: str
    name: str
    created_at: float = 0.0


@dataclass
class Project:
    id: str
    team_id: str
    name: str
    created_at: float = 0.0


@dataclass
class ProjectPath:
    """A project with the names above it, as `llmgw keys` shows it: ORG/TEAM/PROJECT."""

    org: Org
    team: Team
    project: Project

    def __str__(self) -> str:
        return f"{self.org.name}/{self.team.name}/{self.project.name}"


@dataclass
class ApiKey:
    """An API key. Only the sha256 of the secret is kept; `prefix` is what people see."""

    id: str
    name: str
    project_id: str
    digest: bytes
    prefix: str
    person_id: str | None = None
    band: str | None = None
    created_at: float = 0.0
    expires_at: float | None = None
    revoked_at: float | None = None
    # Read with the key for use (key_by_digest, key_by_id), never written: the
    # person the key belongs to is suspended, so the key is refused.
    owner_suspended: bool = False


@dataclass
class Limits:
    """What one level of the tree allows. None is "no limit of its own here"."""

    scope: str
    scope_id: str
    rpm: int | None = None
    tpm: int | None = None
    budget_micros: int | None = None
    period: str | None = None
    models: list[str] | None = None
    expires_at: float | None = None
    tools: list[str] | None = None  # `server.tool` patterns (docs/mcp.md); [] closes the level to every tool


@dataclass
class ProjectCache:
    """A project's answer cache setting (`llmgw keys cache`); no row is off.

    `ttl` is how long an answer is reused, in seconds. `similar` is the
    cosine similarity a like question in the same conversation must reach
    to get an answer already given (0..1); None reuses only the answer to
    the very same request. `enabled` False keeps the last setting on record
    while reusing nothing.
    """

    project_id: str
    ttl: float
    similar: float | None = None
    enabled: bool = True
    updated_at: float = 0.0


@dataclass
class Usage:
    """One request's record. `detail` holds decisions (limits, retries), never text."""

    id: str
    at: float
    key_id: str | None
    project_id: str | None
    model: str
    endpoint: str = ""
    status: int = 200
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    cost_micros: int = 0
    ttft_ms: float | None = None
    duration_ms: float = 0.0
    cache: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    # The id the answer gave the client (chatcmpl-…, msg_…, resp_…), when it got one.
    answer_id: str | None = None
    # The person the key (or the portal's chat) belongs to, when it has one.
    person_id: str | None = None
    # The batch that sent it (batch_…), for a line of a batch: priced at the batch discount.
    batch_id: str | None = None


@dataclass(frozen=True)
class UsageDay:
    """The sums of one UTC day (floor(at / 86400)) and model, in one group:
    a key's, project's or person's id, or None for the model's own row or
    for requests without one. Errors are requests with status 400 and up."""

    day: int
    group: str | None
    model: str
    requests: int
    errors: int
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    cost_micros: int


@dataclass
class McpServer:
    """A company's MCP server behind /mcp (docs/mcp.md).

    `headers` are sent as they are; `header_refs` name where a header's
    value is read at each call (a file, env:NAME, store:NAME); `sealed` is
    the secret headers as one JSON object sealed under the master key
    (llmgw.mcp.servers seals and unseals it), of which `secret_names` are
    the header names, for listings. A stdio server's `url` is `stdio:` and
    its command line, and its headers are its environment instead. `version`
    rises by one with each change.
    """

    name: str
    url: str
    description: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    header_refs: dict[str, str] = field(default_factory=dict)
    secret_names: list[str] = field(default_factory=list)
    sealed: bytes | None = None
    timeout: float = 60.0
    rate: int | None = None
    disabled: bool = False
    allow_private: bool = False
    run_as: str | None = None  # a stdio server's user: None llmgw's unprivileged one, "" the control plane's
    version: int = 1
    created_at: float = 0.0
    updated_at: float = 0.0
    updated_by: str = ""


@dataclass
class AuditEntry:
    """Who changed what. `before`/`after` never carry a secret's value."""

    at: float
    actor: str
    via: str
    action: str
    target: str
    before: Any = None
    after: Any = None
    id: int | None = None


@dataclass
class Lease:
    name: str
    holder: str
    address: str
    expires_at: float
    epoch: int


@dataclass
class Settings:
    """The cluster's settings document and its version (raised by every write)."""

    version: int
    doc: dict[str, Any]
    updated_at: float
    updated_by: str


@dataclass
class ClusterCA:
    """The cluster's certificate authority: its certificate, and its private
    key sealed under the master key (llmgw/trust/masterkey.py)."""

    cert_pem: str
    key_sealed: bytes
    created_at: float


@dataclass
class JoinToken:
    """A one-time code's record (`llmgw node add`). Only the sha256 of its secret is kept."""

    id: str
    digest: bytes
    name: str | None
    created_at: float
    expires_at: float
    created_by: str
    used_at: float | None = None
    node_id: str | None = None


@dataclass
class NodeCertificate:
    """A certificate a control plane signed for a node. `fingerprint` is the sha256 of its DER, in hex."""

    serial: str
    node_id: str
    name: str
    fingerprint: str
    issued_at: float
    expires_at: float


@dataclass
class ControlPlaneAddress:
    """Where a control plane takes agents (HOST:PORT), as it wrote at its last start."""

    name: str
    agent_address: str
    updated_at: float
    version: str = ""  # the llmgw version it runs; "" written by one older than cluster upgrades


@dataclass(frozen=True)
class UpgradeRecord:
    """The cluster's upgrade as far as it got (llmgw.control.upgrade owns `doc`); `revision` counts its writes."""

    revision: int
    doc: dict[str, Any]
    updated_at: float


# "parked": the leader's own, not an agent's: its weights could not be had, and it waits for a retry or removal.
REPLICA_STATES = ("pending", "starting", "ready", "draining", "stopped", "failed", "parked")
DESIRED = ("run", "stop")


@dataclass
class CatalogModel:
    """A model in the catalog: its spec as added (llmgw.control.catalog.spec reads it).

    `version` is raised by every write (compare-and-set, as settings are).
    `removed_at` is set by `ctl model remove` and the row is deleted once
    its replicas have stopped; `purge` then sends the nodes RemoveWeights.
    `restarts` is raised by `ctl restart`: replicas started before are replaced.
    """

    name: str
    spec: dict[str, Any]
    version: int = 0
    stopped: bool = False
    restarts: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    updated_by: str = ""
    removed_at: float | None = None
    purge: bool = False


@dataclass
class NodeRecord:
    """A node as the leader last heard of it: its Register and latest Heartbeat as JSON."""

    id: str
    name: str
    register: dict[str, Any]
    labels: dict[str, str] = field(default_factory=dict)
    heartbeat: dict[str, Any] | None = None
    heartbeat_at: float | None = None
    state: str = ""  # "connected", "lost", …: the reconciler's word for it
    first_seen: float = 0.0
    updated_at: float = 0.0


@dataclass
class Replica:
    """One shard the leader placed. `id` is the shard id the agent knows it by.

    `state` is the agent's last word (pending until the agent has it;
    parked where its word was that the weights could not be had);
    `desired` is the leader's ("stop" once it decided to stop it).
    `cpu_cores`, `memory_mb`, `gpus` (card indexes) and `gpu_memory_mb`
    (on each card; 0 is the whole card) are what it holds on its node, as
    it was started, or as its weights' length says once known for a model
    added without its size. `profile_hash` is what it was started with, so a model
    changed since is seen to need a replacement. `replaces` names the
    replica this one is to take over from once ready.
    """

    id: str
    model: str
    node_id: str
    state: str = "pending"
    profile: int = 0
    desired: str = "run"
    url: str = ""
    since: float = 0.0
    message: str = ""
    created_at: float = 0.0
    profile_hash: str = ""
    cpu_cores: int = 0
    memory_mb: int = 0
    gpus: list[int] = field(default_factory=list)
    gpu_memory_mb: int = 0
    replaces: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ScimUser:
    """A person as a SCIM provider made them: `id` is ours (also the "scim" identity's subject),
    `data` the attributes it sent (name parts, e-mails, extensions), kept to read back as written."""

    id: str
    person_id: str
    user_name: str
    external_id: str | None
    data: dict[str, Any]
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class ScimGroup:
    """A group a SCIM provider pushes; its display_name is what auth.scim.roles and memberships name."""

    id: str
    display_name: str
    external_id: str | None
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class Webhook:
    """A URL the events bus's events are sent to (llmgw/notify). `events` is the kinds sent, ("*",) for all;
    `format` "json" (the event) or "slack" ({"text": …}); `secret_sealed` the signing secret sealed under the
    master key, None to send unsigned; `allow_private` lets the URL be on loopback, link-local or metadata
    addresses."""

    id: str
    url: str
    events: tuple[str, ...] = ("*",)
    format: str = "json"
    secret_sealed: bytes | None = None
    allow_private: bool = False
    enabled: bool = True
    created_at: float = 0.0
    place: str = ""  # "org:ID" or "team:ID": a tenant administrator's, sent only that place's events


@dataclass(frozen=True)
class Delivery:
    """One event for one webhook, kept until it is delivered or given up on. `body` is the JSON sent, as sent at
    every attempt; `once_key` is unique per webhook (an event that happens once, or the delivery's own id)."""

    id: str
    webhook_id: str
    event_kind: str
    body: str
    once_key: str = ""
    attempts: int = 0
    next_attempt_at: float = 0.0
    state: str = "pending"  # pending, delivered, failed
    last_status: int | None = None
    last_error: str = ""
    created_at: float = 0.0
    delivered_at: float | None = None
