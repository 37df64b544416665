"""The store: one async interface over SQLite (embedded) and PostgreSQL.

Everything outside this package uses `open_store(url)` and the `Store`
protocol below; nothing imports `sqlite.py` or `postgres.py` directly.
`Store` is made of one Protocol a domain (`KeysStore`, `UsageStore`,
`CatalogStore`, …), each method in exactly one, and a consumer is typed by
the parts it calls, so that what it may touch is written in its signature
(docs/internals.md lists who takes which).

Addresses: `sqlite:PATH` (a file, made with its directory if missing) or
`postgresql://user:pass@host:port/db`, which may list several hosts with
`?target_session_attrs=read-write` for a store under Patroni (address.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from llmgw.config import redact_url
from llmgw.store.errors import Conflict, SchemaTooNew, StoreError, StoreUnavailable
from llmgw.store.records import (
    ApiKey,
    AuditEntry,
    CatalogModel,
    ClusterCA,
    ControlPlaneAddress,
    Delivery,
    Identity,
    JoinToken,
    Lease,
    Limits,
    McpServer,
    Membership,
    NodeCertificate,
    NodeRecord,
    Org,
    Person,
    PersonToken,
    Project,
    ProjectCache,
    ProjectPath,
    Replica,
    ScimGroup,
    ScimUser,
    Session,
    Settings,
    Team,
    UpgradeRecord,
    Usage,
    UsageDay,
    Webhook,
)
from llmgw.store.records_batch import Batch, BatchLine, LineResult, StoredFile
from llmgw.store.records_jobs import ENDED_JOB, JOB_STATUSES, OPEN_JOB, Job
from llmgw.store.records_kb import (
    KB_ACCESS,
    KB_ADD,
    KB_DROP,
    KB_FILE_IN_PROGRESS,
    KB_FILE_STATUSES,
    KB_GRANT_SCOPES,
    KB_OWNER_SCOPES,
    KB_REMOVE,
    PASSAGES_SUFFIX,
    KbChange,
    KbCounts,
    KbFile,
    KbGrant,
    NewPassage,
    Passage,
    VectorStore,
    shown_name,
)

__all__ = [
    "Store", "open_store", "StoreError", "StoreUnavailable", "SchemaTooNew", "Conflict",
    "ApiKey", "AuditEntry", "Identity", "Lease", "Limits", "McpServer", "Membership", "Org", "Person", "Project",
    "PersonToken",
    "ProjectCache",
    "ProjectPath",
    "Session", "Settings", "Team", "Usage", "UsageDay", "redact_url",
    "CatalogModel", "NodeRecord", "Replica", "ScimGroup", "ScimUser",
    "ClusterCA", "ControlPlaneAddress", "UpgradeRecord", "JoinToken", "NodeCertificate",
    "Batch", "BatchLine", "LineResult", "StoredFile", "Webhook", "Delivery",
    "Job", "JOB_STATUSES", "OPEN_JOB", "ENDED_JOB",
    # the Store's parts, one a domain: each consumer takes the narrowest that covers what it calls
    "ConnectionStore", "PeopleStore", "SecretsStore", "ScimStore", "SignInStore", "KeysStore", "UsageStore",
    "AuditStore", "LeaseStore", "SettingsStore", "TrustStore", "CatalogStore", "WebhookStore", "BatchStore", "KbStore",
    "JobStore",
    "KB_ACCESS", "KB_ADD", "KB_DROP", "KB_FILE_IN_PROGRESS", "KB_FILE_STATUSES", "KB_GRANT_SCOPES",
    "KB_OWNER_SCOPES", "KB_REMOVE", "KbChange", "KbCounts",
    "KbFile", "KbGrant", "NewPassage", "PASSAGES_SUFFIX", "Passage", "VectorStore", "shown_name",
    "McpStore",
]


class ConnectionStore(Protocol):
    """The store as a connection: its address, whether it answers, its schema."""

    url: str  # as given, for messages use redact_url(url)

    async def close(self) -> None: ...
    async def ping(self) -> None: ...
    async def schema_version(self) -> int: ...


class PeopleStore(Protocol):
    """People, their sessions, their places in the tree and their identities in directories."""

    # people and sessions
    async def add_person(self, person: Person) -> Person: ...  # Conflict on a taken email
    async def person_by_id(self, person_id: str) -> Person | None: ...
    async def person_by_email(self, email: str) -> Person | None: ...  # case-insensitive
    async def list_people(self) -> list[Person]: ...
    async def count_people(self) -> int: ...
    # Replaces the row by id, whole; Conflict on an email taken by another, StoreError for no such person.
    async def update_person(self, person: Person) -> Person: ...
    async def add_session(self, session: Session) -> None: ...
    async def session_by_id(self, session_id: str) -> Session | None: ...
    async def session_by_chat_digest(self, digest: bytes) -> Session | None: ...
    async def touch_session(self, session_id: str, at: float) -> None: ...  # never moves last_seen_at back
    async def list_sessions(self, person_id: str) -> list[Session]: ...  # last seen first
    async def delete_session(self, session_id: str) -> None: ...
    # Every session of the person but `keep`; how many ended.
    async def delete_sessions(self, person_id: str, keep: str | None = None) -> int: ...

    # memberships: a person's places in the tree
    async def add_membership(self, m: Membership) -> None: ...  # idempotent
    async def remove_membership(self, person_id: str, scope: str, scope_id: str) -> None: ...
    async def memberships(self, person_id: str) -> list[Membership]: ...
    async def members_of(self, scope: str, scope_id: str) -> list[Membership]: ...
    # Make the membership (scope, scope_id) an administrator's, or no longer; False when there is no such membership.
    async def set_administers(self, person_id: str, scope: str, scope_id: str, administers: bool) -> bool: ...
    async def administrators(self) -> list[Membership]: ...  # every membership that administers, any person

    # a person's own tokens for the admin API
    async def add_person_token(self, token: PersonToken) -> None: ...
    async def person_token_by_digest(self, digest: bytes) -> PersonToken | None: ...
    async def person_tokens(self, person_id: str) -> list[PersonToken]: ...  # newest first
    async def revoke_person_token(self, token_id: str, at: float) -> PersonToken | None: ...
    async def touch_person_token(self, token_id: str, at: float) -> None: ...

    # identities: a person as a directory knows them (source: oidc | ldap | scim)
    async def add_identity(self, identity: Identity) -> None: ...  # Conflict when (source, subject) is tied
    async def identity(self, source: str, subject: str) -> Identity | None: ...
    async def identities_of(self, person_id: str) -> list[Identity]: ...
    async def list_identities(self, source: str) -> list[Identity]: ...
    async def touch_identity(self, source: str, subject: str, at: float) -> None: ...  # never moves seen_at back
    async def delete_identity(self, source: str, subject: str) -> None: ...


class SecretsStore(Protocol):
    """Secrets sealed under the master key by the caller (llmgw.auth.secrets), by name: sign-in's, such as
    "auth/ldap-bind", and the SCIM token's digest."""

    async def put_sealed_secret(self, name: str, sealed: bytes, at: float) -> None: ...  # replaces
    async def sealed_secret(self, name: str) -> bytes | None: ...
    async def delete_sealed_secret(self, name: str) -> bool: ...  # whether there was one
    async def list_sealed_secrets(self, prefix: str) -> list[str]: ...  # the names under prefix, never values


class ScimStore(Protocol):
    """SCIM provisioning's users and groups (llmgw.auth.scim): userName and displayName are
    unique without regard to case."""

    async def add_scim_user(self, user: ScimUser) -> None: ...  # Conflict: userName taken, or the person has one
    async def update_scim_user(self, user: ScimUser) -> None: ...  # userName, externalId, data; Conflict when taken
    async def scim_user(self, user_id: str) -> ScimUser | None: ...
    async def scim_user_by_name(self, user_name: str) -> ScimUser | None: ...
    async def scim_user_of(self, person_id: str) -> ScimUser | None: ...
    async def list_scim_users(self) -> list[ScimUser]: ...
    async def delete_scim_user(self, user_id: str) -> bool: ...  # and their group memberships; never the person
    async def add_scim_group(self, group: ScimGroup) -> None: ...  # Conflict when the displayName is taken
    async def update_scim_group(self, group: ScimGroup) -> None: ...
    async def scim_group(self, group_id: str) -> ScimGroup | None: ...
    async def scim_group_by_name(self, display_name: str) -> ScimGroup | None: ...
    async def list_scim_groups(self) -> list[ScimGroup]: ...
    async def delete_scim_group(self, group_id: str) -> list[str]: ...  # the person ids that were its members
    async def scim_group_members(self, group_id: str) -> list[str]: ...  # person ids
    async def add_scim_group_members(self, group_id: str, person_ids: Sequence[str]) -> None: ...
    async def remove_scim_group_members(self, group_id: str, person_ids: Sequence[str]) -> None: ...
    async def scim_groups_of(self, person_id: str) -> list[ScimGroup]: ...


class SignInStore(Protocol):
    """What sign-in remembers between requests: failed attempts, and single sign-on states spent."""

    # failed sign-ins: subject is "account:<email_key>" or "address:<ip>"
    # Also forgets failures more than a day older than `at`.
    async def add_sign_in_failure(self, subjects: Sequence[str], at: float) -> None: ...
    async def sign_in_failures(self, subject: str, since: float) -> int: ...
    async def clear_sign_in_failures(self, subject: str) -> None: ...
    # A single sign-on's state, spent: True the first time `digest` is given, False ever after (until
    # `until`, when it is forgotten, its flow having expired). Also forgets those past `at`.
    async def spend_sign_in(self, digest: str, at: float, until: float) -> bool: ...


class KeysStore(Protocol):
    """The tenancy tree, API keys, and what is set at a level of the tree: limits, and a project's
    answer cache."""

    # the tenancy tree
    async def ensure_project(self, org: str, team: str, project: str) -> ProjectPath: ...
    # Each Conflict when the name is taken at its level, StoreError when the parent is missing.
    async def create_org(self, name: str) -> Org: ...
    async def create_team(self, org_id: str, name: str) -> Team: ...
    async def create_project(self, team_id: str, name: str) -> ProjectPath: ...
    async def project_by_path(self, org: str, team: str, project: str) -> ProjectPath | None: ...
    async def project_path(self, project_id: str) -> ProjectPath | None: ...
    async def org_by_id(self, org_id: str) -> Org | None: ...
    async def team_by_id(self, team_id: str) -> Team | None: ...
    async def org_by_name(self, name: str) -> Org | None: ...
    async def team_by_name(self, org_id: str, name: str) -> Team | None: ...
    async def list_orgs(self) -> list[Org]: ...
    async def list_teams(self, org_id: str | None = None) -> list[Team]: ...
    async def list_projects(self, team_id: str | None = None) -> list[Project]: ...

    # API keys
    async def add_key(self, key: ApiKey) -> ApiKey: ...
    async def key_by_digest(self, digest: bytes) -> ApiKey | None: ...
    async def key_by_id(self, key_id: str) -> ApiKey | None: ...
    # Oldest first; `limit`/`offset` page them.
    async def list_keys(self, project_id: str | None = None, *, person_id: str | None = None,
                        limit: int | None = None, offset: int = 0) -> list[ApiKey]: ...
    async def count_keys(self, project_id: str | None = None, *, person_id: str | None = None) -> int: ...
    async def revoke_key(self, key_id: str, at: float) -> ApiKey | None: ...  # idempotent

    # limits at each level
    async def get_limits(self, scope: str, scope_id: str) -> Limits | None: ...
    async def put_limits(self, limits: Limits) -> None: ...  # replaces the row whole
    async def list_budgets(self) -> list[Limits]: ...  # every level with a budget, by scope and id

    # the answer cache's setting per project (no row: off)
    async def get_project_cache(self, project_id: str) -> ProjectCache | None: ...
    # Replaces the row whole; StoreError when there is no such project.
    async def put_project_cache(self, setting: ProjectCache) -> None: ...
    async def list_project_caches(self) -> list[ProjectCache]: ...  # every row, by project id


class UsageStore(Protocol):
    """Usage rows, written in batches, and the sums and pages read from them."""

    async def add_usage(self, rows: Sequence[Usage]) -> None: ...  # one transaction
    async def usage_rows(self, since: float, until: float | None = None,
                         key_id: str | None = None, project_id: str | None = None,
                         limit: int = 1000) -> list[Usage]: ...
    async def spend_since(self, scope: str, scope_id: str, since: float) -> int: ...
    # By the request's id (x-request-id) or the id its answer carried (chatcmpl-…, msg_…, resp_…).
    async def usage_by_id(self, request_id: str) -> Usage | None: ...
    # The latest rows matching every filter given, newest first; errors: status >= 400.
    async def recent_usage(self, limit: int = 50, since: float | None = None,
                           key_id: str | None = None, model: str | None = None,
                           status: int | None = None, errors: bool = False) -> list[Usage]: ...
    # One dict a key_id, project_id or model ("group", None for rows without
    # one): requests, errors (status >= 400), prompt_tokens, cached_tokens,
    # completion_tokens, cost_micros; most costly first. StoreError for
    # another `by`.
    # batch_only: the rows of batch lines only (Usage.batch_id set); project_ids: those projects' rows only
    # (a tenant administrator's, llmgw.account.scope), none when it is empty.
    async def usage_summary(self, since: float, until: float | None = None,
                            by: str = "key", *, batch_only: bool = False,
                            project_ids: Sequence[str] | None = None) -> list[dict[str, Any]]: ...
    # A page of an export: rows in [since, until) after (after_at, after_id),
    # the previous page's last row; oldest first; of one person, or of some
    # projects (none: no rows), when given.
    async def usage_page(self, since: float, until: float | None = None,
                         after_at: float | None = None, after_id: str | None = None,
                         limit: int = 1000, *, person_id: str | None = None,
                         project_ids: Sequence[str] | None = None) -> list[Usage]: ...

    # usage summed a UTC day at a time (usage_daily), kept in step by add_usage
    # UsageDays in [since_day, until_day) (until_day None: to the latest), of
    # the rows matching every filter given, oldest day first: by model, one a
    # day and model (group None); by key, project or person, one a day and
    # group, summed over the models (model ""). Where no key (and no person,
    # or no projects) narrows it, it reads a rollup (usage_project_daily or
    # usage_person_daily) rather than usage_daily; by project or person, the
    # day totals (usage_project_day_totals, usage_person_day_totals) as they are.
    # StoreError for another `by`.
    async def usage_by_day(self, since_day: int, until_day: int | None = None, *,
                           person_id: str | None = None, project_ids: Sequence[str] | None = None,
                           key_id: str | None = None, by: str = "model") -> list[UsageDay]: ...
    # Each key's spend from since_day on, in micro-units; 0 for a key that spent nothing.
    async def spend_by_keys(self, key_ids: Sequence[str], since_day: int) -> dict[str, int]: ...
    # The projects' spend together from since_day on, in micro-units.
    async def spend_by_projects(self, project_ids: Sequence[str], since_day: int) -> int: ...
    # The latest rows with guardrail decisions in their detail, newest first.
    async def recent_decisions(self, limit: int = 50) -> list[Usage]: ...
    # Sums usage_daily again from every raw row, and the rollups from it, in
    # one transaction: a repair, and the last step of a bulk load that
    # went around add_usage.
    async def rebuild_usage_daily(self) -> None: ...


class AuditStore(Protocol):
    """The audit: who did what to what, as every operation that changes something records it."""

    async def add_audit(self, entry: AuditEntry) -> None: ...
    # Newest first; actor and action match whole (the admin pages' filter), offset pages on.
    async def list_audit(self, limit: int = 100, since: float | None = None,
                         target: str | None = None, *, actor: str | None = None, action: str | None = None,
                         offset: int = 0) -> list[AuditEntry]: ...


class LeaseStore(Protocol):
    """Leadership: named leases, timed by the database's clock."""

    async def try_lease(self, name: str, holder: str, address: str, ttl: float) -> Lease: ...
    async def get_lease(self, name: str) -> Lease | None: ...
    async def release_lease(self, name: str, holder: str) -> None: ...


class SettingsStore(Protocol):
    """The cluster's documents, each one record written by compare-and-set: its settings and its
    upgrade (docs/upgrade.md)."""

    async def get_settings(self) -> Settings | None: ...
    async def settings_version(self) -> int: ...  # 0 when none written yet
    async def put_settings(self, doc: dict[str, Any], expected_version: int, by: str) -> Settings: ...

    # The cluster's upgrade (docs/upgrade.md): one record; put compares `expected_revision` (0: none yet) and
    # raises Conflict when another control plane wrote it meanwhile.
    async def get_upgrade(self) -> UpgradeRecord | None: ...
    async def put_upgrade(self, doc: dict[str, Any], expected_revision: int, at: float) -> UpgradeRecord: ...


class TrustStore(Protocol):
    """The cluster's trust (docs/cluster.md): its CA, join tokens, node certificates and the
    control planes' addresses."""

    async def get_cluster_ca(self) -> ClusterCA | None: ...
    # Keeps `ca` when the store has none; returns the one kept, which is
    # another control plane's when two start on a fresh store at once.
    async def put_cluster_ca(self, ca: ClusterCA) -> ClusterCA: ...
    # Also forgets tokens that ran out more than a week before `token.created_at`.
    async def add_join_token(self, token: JoinToken) -> None: ...  # Conflict on a known digest
    async def join_token(self, digest: bytes) -> JoinToken | None: ...
    # Marks the token used by `node_id` at `at`, in one statement, when it is
    # unused and has not run out at `at`; None otherwise (join_token says why).
    async def use_join_token(self, digest: bytes, node_id: str, at: float) -> JoinToken | None: ...
    async def add_node_certificate(self, cert: NodeCertificate) -> None: ...
    async def list_node_certificates(self, node_id: str | None = None) -> list[NodeCertificate]: ...
    async def put_control_plane(self, cp: ControlPlaneAddress) -> None: ...  # by name, replaced whole
    async def list_control_planes(self) -> list[ControlPlaneAddress]: ...  # last written first


class CatalogStore(Protocol):
    """The catalog, the nodes and their replicas (docs/models.md)."""

    async def add_model(self, model: CatalogModel) -> CatalogModel: ...  # version 1; Conflict on a name in use
    async def get_model(self, name: str) -> CatalogModel | None: ...  # a removed one too
    async def list_models(self, include_removed: bool = False) -> list[CatalogModel]: ...  # by name
    # Compare-and-set: lands only on `expected_version`, raising it by one;
    # Conflict naming the version now otherwise, StoreError for no such model.
    async def put_model(self, model: CatalogModel, expected_version: int) -> CatalogModel: ...
    async def delete_model(self, name: str) -> None: ...
    async def put_node(self, node: NodeRecord) -> None: ...  # by id, replaced whole
    # (id, heartbeat, at) for each node heard from
    async def put_node_heartbeats(self, beats: Sequence[tuple[str, dict[str, Any], float]]) -> None: ...
    async def get_node(self, node_id: str) -> NodeRecord | None: ...
    async def list_nodes(self) -> list[NodeRecord]: ...  # by name, then id
    async def delete_node(self, node_id: str) -> None: ...
    async def put_replicas(self, replicas: Sequence[Replica]) -> None: ...  # by id, replaced whole; one transaction
    async def get_replica(self, replica_id: str) -> Replica | None: ...
    async def list_replicas(self, model: str | None = None, node_id: str | None = None) -> list[Replica]: ...
    async def delete_replicas(self, replica_ids: Sequence[str]) -> None: ...


class WebhookStore(Protocol):
    """Notification webhooks and their deliveries (sql_notify.py, docs/webhooks.md)."""

    async def add_webhook(self, hook: Webhook) -> None: ...  # Conflict on a taken id
    async def webhook(self, webhook_id: str) -> Webhook | None: ...
    async def list_webhooks(self) -> list[Webhook]: ...  # oldest first
    async def delete_webhook(self, webhook_id: str) -> bool: ...  # and its deliveries; False when none
    # Each delivery unless its (webhook_id, once_key) is kept already, or its webhook is gone; returns how many.
    async def add_deliveries(self, deliveries: Sequence[Delivery]) -> int: ...
    async def delivery(self, delivery_id: str) -> Delivery | None: ...
    async def due_deliveries(self, now: float, limit: int = 50) -> list[Delivery]: ...  # pending and due, soonest first
    async def list_deliveries(self, webhook_id: str | None = None, state: str | None = None,
                              limit: int = 100) -> list[Delivery]: ...  # newest first
    async def record_attempt(self, delivery: Delivery) -> None: ...  # an attempt's outcome; StoreError when gone


class BatchStore(Protocol):
    """Files and batches with their lines (sql_batch.py, docs/batches.md)."""

    async def add_file(self, file: StoredFile, content: bytes | None) -> None: ...  # content: IN_STORE's bytes
    async def file_by_id(self, file_id: str) -> StoredFile | None: ...
    async def file_content(self, file_id: str) -> bytes | None: ...  # None when not kept in the store
    # A project's files, newest first, after the file `after` (a page's last).
    async def list_files(self, project_id: str, *, purpose: str | None = None, limit: int = 100,
                         after: str | None = None) -> list[StoredFile]: ...
    async def delete_file(self, file_id: str) -> bool: ...  # False when there was none
    async def project_file_bytes(self, project_id: str) -> int: ...
    async def file_in_open_batch(self, file_id: str) -> str | None: ...  # a batch not ended that uses it
    # Files made before `before` that no open batch uses, oldest first: what retention deletes.
    async def old_files(self, before: float, limit: int = 500, *, purposes: Sequence[str] | None = None,
                        exclude: Sequence[str] = ()) -> list[StoredFile]: ...
    async def delete_ended_batches(self, before: float) -> int: ...  # ended batches made before, with their lines
    # The batch and its lines (pending, numbered from 1), in one transaction.
    async def add_batch(self, batch: Batch, custom_ids: Sequence[str]) -> None: ...
    async def batch_by_id(self, batch_id: str) -> Batch | None: ...
    async def list_batches(self, project_id: str, *, limit: int = 20, after: str | None = None) -> list[Batch]: ...
    async def open_batches(self) -> list[Batch]: ...  # not ended, oldest first
    # Compare and set: the status (and BATCH_STAMPS columns) only if it is one of from_statuses.
    async def move_batch(self, batch_id: str, from_statuses: Sequence[str], status: str,
                         changes: dict[str, Any] | None = None) -> bool: ...
    async def pending_lines(self, batch_id: str) -> list[int]: ...
    # Lines' outcomes with their usage rows, one transaction, pending lines only: (done, failed) recorded.
    async def finish_lines(self, batch_id: str, results: Sequence[LineResult]) -> tuple[int, int]: ...
    async def batch_lines(self, batch_id: str, state: str | None = None) -> list[BatchLine]: ...


class JobStore(Protocol):
    """Workflow jobs: ComfyUI workflows run by POST /v1/workflows/runs (sql_jobs.py)."""

    async def add_job(self, job: Job) -> None: ...
    async def job_by_id(self, job_id: str) -> Job | None: ...
    # A project's jobs, newest first, after the job `after` (a page's last), of one model when given.
    async def list_jobs(self, project_id: str, *, limit: int = 20, after: str | None = None,
                        model: str | None = None) -> list[Job]: ...
    async def open_jobs(self) -> list[Job]: ...  # queued and running, oldest first: the leader's runner's
    # Compare and set: the status (and JOB_CHANGES columns, JSON ones dumped) only if it is one of
    # from_statuses; False when it was not. StoreError for a column not in JOB_CHANGES.
    async def move_job(self, job_id: str, from_statuses: Sequence[str], status: str,
                       changes: dict[str, Any] | None = None) -> bool: ...
    async def set_job_progress(self, job_id: str, progress: dict[str, Any]) -> None: ...  # only while running
    # Ended jobs made before `before`, oldest first: what retention deletes, with their output files.
    async def old_jobs(self, before: float, limit: int = 500) -> list[Job]: ...
    async def delete_job(self, job_id: str) -> bool: ...  # False when there was none


class KbStore(Protocol):
    """Knowledge bases: OpenAI's vector stores, their files and passages (sql_kb.py, docs/knowledge.md)."""

    async def add_vector_store(self, vs: VectorStore) -> None: ...
    async def vector_store(self, vector_store_id: str) -> VectorStore | None: ...
    # Those owned by or given to one of `places` ((scope, id): a key's project, team, org, and the key).
    async def list_vector_stores(self, places: Sequence[tuple[str, str]], *, limit: int = 20,
                                 after: str | None = None, newest_first: bool = True) -> list[VectorStore]: ...
    async def kb_grants(self, vector_store_id: str) -> list[KbGrant]: ...
    async def grant_kb(self, grant: KbGrant) -> None: ...  # replacing one to the same place
    async def revoke_kb(self, vector_store_id: str, scope: str, scope_id: str) -> bool: ...
    async def all_vector_stores(self, limit: int = 1000) -> list[VectorStore]: ...  # every project's, newest first
    async def update_vector_store(self, vector_store_id: str, *, name: str | None = None,
                                  metadata: dict[str, str] | None = None) -> VectorStore | None: ...
    async def delete_vector_store(self, vector_store_id: str) -> bool: ...  # with its files' places and passages
    async def vector_store_counts(self, vector_store_ids: Sequence[str]) -> dict[str, KbCounts]: ...
    async def add_kb_file(self, file: KbFile) -> bool: ...  # False when it is in the knowledge base already
    async def kb_file(self, vector_store_id: str, file_id: str) -> KbFile | None: ...
    async def list_kb_files(self, vector_store_id: str, *, status: str | None = None, limit: int = 20,
                            after: str | None = None, newest_first: bool = True,
                            batch_id: str | None = None) -> list[KbFile]: ...
    # A file batch's files by status and when it was made (None: no such batch); its files in progress cancelled.
    async def kb_batch_counts(self, vector_store_id: str, batch_id: str) -> tuple[KbCounts, float] | None: ...
    async def cancel_kb_batch(self, vector_store_id: str, batch_id: str) -> int: ...
    async def kb_files_in_progress(self) -> list[KbFile]: ...  # oldest first
    # Its passages and status completed in one transaction, only while it is in progress.
    async def finish_kb_file(self, vector_store_id: str, file_id: str, passages: Sequence[NewPassage],
                             skipped: Sequence[dict[str, Any]] = ()) -> bool: ...
    async def fail_kb_file(self, vector_store_id: str, file_id: str, status: str, code: str,
                           message: str) -> bool: ...
    async def remove_kb_file(self, vector_store_id: str, file_id: str) -> bool: ...  # with its passages
    async def remove_file_from_kbs(self, file_id: str) -> list[str]: ...  # from every knowledge base
    async def passage_vectors(self, vector_store_id: str, file_id: str | None = None, *, after: int = 0,
                              limit: int | None = None) -> list[tuple[int, str, bytes]]: ...  # limit: a page, by id
    async def passage_vectors_by_id(self, ids: Sequence[int]) -> list[tuple[int, bytes]]: ...  # those still there
    async def passages_by_id(self, ids: Sequence[int]) -> list[Passage]: ...  # those still there
    async def search_words(self, vector_store_ids: Sequence[str], question: str, limit: int,
                           file_ids: Sequence[str] | None = None) -> list[int]: ...
    # (file id, attributes, passages) of each completed file: what a search's filters choose among.
    async def kb_file_attributes(self, vector_store_ids: Sequence[str]) -> list[tuple[str, dict[str, Any], int]]: ...
    async def kb_changes(self, after: int, limit: int = 1000) -> list[KbChange]: ...
    async def kb_last_change(self) -> int: ...
    async def prune_kb_changes(self, before: float) -> int: ...  # those written before, but the last


class McpStore(Protocol):
    """The company's MCP servers behind /mcp (docs/mcp.md); secret headers arrive sealed by
    llmgw.mcp."""

    async def add_mcp_server(self, server: McpServer) -> McpServer: ...  # version 1; Conflict on a name in use
    # Compare-and-set on `expected_version`, as put_model; Conflict naming the version now, StoreError for none.
    async def put_mcp_server(self, server: McpServer, expected_version: int) -> McpServer: ...
    async def get_mcp_server(self, name: str) -> McpServer | None: ...
    async def list_mcp_servers(self) -> list[McpServer]: ...  # by name
    async def delete_mcp_server(self, name: str) -> bool: ...  # whether there was one


class Store(ConnectionStore, PeopleStore, SecretsStore, ScimStore, SignInStore, KeysStore, UsageStore, AuditStore,
            LeaseStore, SettingsStore, TrustStore, CatalogStore, WebhookStore, BatchStore, JobStore, KbStore,
            McpStore, Protocol):
    """The whole store, every domain's part. What owns the store (the control plane, a router
    worker) holds it as this and hands each consumer the store typed by the part, or the parts
    together, that consumer calls: the accounting's UsageWriter is given a UsageStore, and so can
    be shown by mypy not to read a key or move a replica.

    Every method raises StoreUnavailable (with a sentence naming the store) when the store does
    not answer, never a driver's own exception."""


async def open_store(url: str, *, migrate: bool = True, timeout: float = 3.0) -> Store:
    """Open the store at `url` and bring its schema up to this program's.

    Raises StoreUnavailable when it cannot be reached within `timeout`,
    SchemaTooNew when a newer llmgw has migrated it, StoreError for an
    address that is neither sqlite: nor postgresql://.
    """
    if url.startswith("sqlite:"):
        from llmgw.store.sqlite import open_sqlite

        return await open_sqlite(url, migrate=migrate, timeout=timeout)
    if url.startswith(("postgres://", "postgresql://")):
        from llmgw.store.postgres import open_postgres

        return await open_postgres(url, migrate=migrate, timeout=timeout)
    raise StoreError(
        f'the store address "{url}" is neither sqlite:PATH nor postgresql://HOST/DB'
    )
