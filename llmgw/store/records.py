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
VIAS = ("api", "cli", "portal", "system")


@dataclass
class Person:
    id: str
    email: str
    name: str
    role: str = "member"
    password_hash: str | None = None
    created_at: float = 0.0
    disabled: bool = False


@dataclass
class Session:
    """A portal sign-in. `id` is the sha256 of the cookie's value, never the value."""

    id: str
    person_id: str
    created_at: float
    expires_at: float


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
    key sealed under the master key (llmgw/control/trust/masterkey.py)."""

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
