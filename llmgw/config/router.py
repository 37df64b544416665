"""The cluster's settings for the client API: routing, admission, timeouts, and the models.

Like every cluster setting these live in the store and change live; the
string under each field is its entry in docs/reference.md.
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

from llmgw.config.capabilities import CAPABILITIES, PICTURES, Capability, duplicate, ordered
from llmgw.config.loader import Invalid
from llmgw.config.media import ComfyUIModel
from llmgw.config.targets import host_refusal
from llmgw.config.types import Duration, Size, describe
from llmgw.errors import N_

PROFILES = ("chat", "batch", "long-context")


@dataclass(frozen=True)
class CacheSettings:
    max_bytes: Size = Size("256MB")
    """How much memory the answer cache may hold, on each control plane. Past it, the answers used longest ago go first.
    The cache is never written to disk and is empty after a restart; 0 keeps no answers."""

    max_entry_bytes: Size = Size("1MB")
    """The largest single answer the cache keeps; a longer one is served but not kept, so one long answer cannot push
    out many short ones."""

    embedding_model: str = ""
    """The catalog's embedding model used to compare questions, for projects that reuse answers to similar questions
    (`llmgw keys cache --similar`).
    Asked at its local endpoints only, never an outside provider's, within `embedding_budget`, and only for a key that
    may use it. Empty: those projects reuse only the answer to the very same request."""

    embedding_budget: Duration = Duration("2s")
    """How long a question waits for the embedding model before it is looked up as the very same request only.
    Every miss of a project that reuses answers to similar questions waits this long at most; a larger model, or one
    on a busy CPU, may need more."""

    read_every: Duration = Duration("2s")
    """How often each control plane reads the projects' answer cache settings: a change made with
    `llmgw keys cache` is in force everywhere within this."""

    def validate(self) -> None:
        if not self.embedding_budget:
            raise Invalid("embedding_budget", N_("0s would never wait for the embedding model, so no similar question "
                                                 "would be found; give a span like 2s, or empty embedding_model"))
        if not self.read_every:
            raise Invalid("read_every", N_("0s would read the projects' cache settings without pause; give a span "
                                           'like 2s'))
        if self.max_bytes and self.max_entry_bytes > self.max_bytes:
            raise Invalid(
                "max_entry_bytes",
                N_('{max_entry_bytes} is more than max_bytes ({max_bytes}); no answer that size could be kept'),
                params={"max_entry_bytes": self.max_entry_bytes, "max_bytes": self.max_bytes}
            )


@dataclass(frozen=True)
class Band:
    name: str
    """The band's name, as keys name it (`llmgw keys create --band`)."""

    priority: int = 0
    """Higher goes first: when every replica is busy, a waiting request of a higher band is let in before any of a lower
    one."""

    queue_ttl: Duration = Duration(0)
    """How long a request of this band may wait for room before it is refused with 504 and Retry-After. 0 takes
    `router.admission.queue_ttl`."""


@dataclass(frozen=True)
class AdmissionSettings:
    saturation: int = 64
    """Requests in flight on one replica at which it counts as full. When every replica of a model is full, new requests
    wait in their band's queue. 0 turns admission off.
    Outside providers never count as full: their own 429 is the signal."""

    queue_ttl: Duration = Duration("30s")
    """How long a request waits for room by default before it is refused with 504 and Retry-After."""

    default_band: str = "standard"
    """The band of a key that names none."""

    bands: list[Band] = field(default_factory=lambda: [
        Band("interactive", 100), Band("standard", 50), Band("batch", 0, Duration("10m"))])
    """Priority bands. People at a chat window are let in before a batch job that would rather wait than be turned
    away."""

    def validate(self) -> None:
        if self.saturation < 0:
            raise Invalid("saturation", N_("must be 0 or more, got {value}"), params={"value": self.saturation})
        names = [b.name for b in self.bands]
        for i, name in enumerate(names):
            if not name or names.index(name) != i:
                raise Invalid(f"bands[{i}].name", N_('each band needs a name of its own, got {name}'),
                                                  params={"name": describe(name)})
        if self.bands and self.default_band not in names:
            raise Invalid("default_band", N_('{default_band} is not one of the bands ({names})'),
                                          params={"default_band": self.default_band, "names": ', '.join(names)})


@dataclass(frozen=True)
class Timeouts:
    connect: Duration = Duration("5s")
    """How long to wait for an engine to accept the connection before trying another replica."""

    first_byte: Duration = Duration("5m")
    """How long to wait for an engine's first byte (a long prompt is read before anything comes back) before trying
    another replica or refusing with 504."""

    idle: Duration = Duration("2m")
    """The longest silence between two parts of a streamed answer before it is cut and the stream ended with an
    error."""

    total: Duration = Duration("30m")
    """The longest a whole request may take, answer included."""

    load: Duration = Duration("5m")
    """How long a request for a catalog model with no replica ready waits for one to load (an on-demand model asked for,
    a replica starting) before it is refused with 503, the reason placement gives and Retry-After.
    A streamed request is sent `: waiting for MODEL to load` comments meanwhile. Not counted in `total`."""

    client_headers: Duration = Duration("20s")
    """How long a client has to send a request's headers, from its connection or from the first byte of its next
    request; past it the connection is closed.
    A client that opens connections and never finishes a request would otherwise hold them for good."""

    client_idle: Duration = Duration("75s")
    """How long a kept-alive client connection may sit between requests before it is closed. Clients open a new one as
    they need it."""

    client_body_rate: Size = Size("1KB")
    """The slowest a request body may arrive, in bytes a second averaged since its headers, once `client_body_grace` has
    passed; a slower one's connection is closed. 0 checks no rate."""

    client_body_grace: Duration = Duration("10s")
    """How long a request body may take before `client_body_rate` is checked, so a short body on a slow start is never
    cut."""

    def validate(self) -> None:
        for key in ("client_headers", "client_idle"):
            if getattr(self, key) <= 0:
                raise Invalid(key, N_('must be more than 0, got {value}; a client could hold a connection for good'),
                                   params={"value": getattr(self, key)})


@dataclass(frozen=True)
class BreakerSettings:
    failures: int = 5
    """Failures in a row after which a replica or provider key is passed over. An engine that cannot be reached
    (connection refused, no connection in time) always counts; a provider's 429 or 401 opens it at once.
    An answer that failed (a 5xx other than 501, a timeout, a connection dropped mid-request) counts only when the
    failures came from `distinct_keys` API keys, or when the replica's own health check (`GET /v1/models`, 2 s) fails
    too: one client's prompts cannot take a model away from everyone. An engine's 4xx and 501 are the request's own
    refusal and never count."""

    distinct_keys: int = 2
    """How many different API keys the failed answers in a row must come from to open the breaker without a failed
    health check. Raise it where people can make many keys of their own; 1 counts every failed answer, whoever asked."""

    open_for: Duration = Duration("30s")
    """How long a tripped replica is passed over before one request is let through to see whether it has recovered."""

    def validate(self) -> None:
        for key in ("failures", "distinct_keys"):
            if getattr(self, key) < 1:
                raise Invalid(key, N_("must be 1 or more, got {value}"), params={"value": getattr(self, key)})


@dataclass(frozen=True)
class KnowledgeSettings:
    """Knowledge bases on `/v1/vector_stores` (docs/knowledge.md)."""

    embedding_model: str = ""
    """The catalog's model that embeds a knowledge base made without naming one (`embedding_model` on
    POST /v1/vector_stores). Empty: each knowledge base names its own. A base keeps the model it was made with."""


@dataclass(frozen=True)
class BatchSettings:
    """Files and batches on `/v1/files` and `/v1/batches` (docs/batches.md)."""

    max_file_bytes: Size = Size("100MB")
    """The largest file one upload may be; a larger one is refused with 413."""

    project_quota: Size = Size("1GB")
    """The most bytes of files one project may hold at once, uploads and the output and error files its batches wrote
    together. An upload past it is refused with 413, saying how much the project holds; deleting files makes room."""

    store_below: Size = Size("1MB")
    """Files smaller than this are kept in the store; larger ones on the leader's data directory, under `files/`."""

    max_lines: int = 50000
    """The most requests one batch's input file may hold."""

    concurrency: int = 16
    """How many batch lines the leader has in flight at once, over every batch. They go in at the lowest admission
    band, so a busy model lets people's requests in first whatever this is."""

    retain_days: int = 30
    """How long files and ended batches are kept: the leader deletes, once an hour, files made longer ago than this
    that no running batch uses, and batches that ended and were made longer ago. 0 keeps them until deleted. Pictures
    and workflow runs' files are kept for `router.jobs.retain_days` instead."""

    def validate(self) -> None:
        if self.concurrency < 1:
            raise Invalid("concurrency", N_("must be 1 or more, got {value}"), params={"value": self.concurrency})
        if self.max_lines < 1:
            raise Invalid("max_lines", N_("must be 1 or more, got {value}"), params={"value": self.max_lines})
        if self.retain_days < 0:
            raise Invalid("retain_days", N_("must be 0 or more, got {value}"), params={"value": self.retain_days})


@dataclass(frozen=True)
class JobSettings:
    """Workflow runs as jobs on `/v1/workflows/runs` (docs/media.md)."""

    retain_days: int = 30
    """How long an ended run and the files it made are kept, and a picture answered as a url: the leader deletes, once
    an hour, runs that ended and were made longer ago than this, with their files, and such pictures and files that
    old (a file a queued or running run was given stays until it ends). 0 keeps them until deleted."""

    per_model: int = 1
    """Runs of one model at a time on one of its replicas: a ComfyUI replica runs one workflow at a time, and a run
    waiting behind another on its card would hold up a run of another model that could start now."""

    per_node: int = 8
    """Runs at once on one node, over all its models."""

    max_open: int = 100
    """Runs one project may have queued or running at once; one more is refused with 429 until some end."""

    def validate(self) -> None:
        for key in ("retain_days", "per_model", "per_node", "max_open"):
            least = 0 if key == "retain_days" else 1
            if getattr(self, key) < least:
                raise Invalid(key, N_("must be {least} or more, got {value}"),
                              params={"least": least, "value": getattr(self, key)})


@dataclass(frozen=True)
class RouterSettings:
    cache: CacheSettings = field(default_factory=CacheSettings)
    """The answer cache: answers kept in memory, for projects that turned it on, and given again for the same
    request."""

    trusted_proxies: list[str] = field(default_factory=list)
    """Load balancers and proxies in front of the control planes, as addresses or CIDR prefixes (10.0.0.0/8).
    Only their X-Forwarded-For is believed, read from the right: the first address in it that is not a trusted proxy is
    the client that the unknown-key throttle and the connection cap count. Anyone else's is ignored, as anyone could
    forge it.
    With standbys that pass `/v1` on to the leader, list the control planes too."""

    active_active: bool = False
    """Standbys answer `/v1` themselves, routing to the leader's replicas, instead of passing it on to the leader; rate
    limits stay the cluster's (every 2 s). Point clients at every control plane. See docs/ha.md.
    A standby that has not heard from the leader for a minute passes `/v1` on again, or answers 503 while nobody
    leads."""

    max_body: Size = Size("32MB")
    """The largest request body the client API reads; a larger one is refused with 413 before it is read whole.
    A body sent with `Content-Encoding: gzip` or `deflate` is measured as it is inflated, so a small compressed body
    that inflates past this is refused the same way."""

    max_n: int = 8
    """The most answers one request may ask for with `n` (or `best_of`, on `/v1/completions`); more is refused with 400.
    Each answer costs the engine as much as a request of its own, so without a cap one request could take a replica's
    whole batch."""

    default_profile: Literal["chat", "batch", "long-context", "prefix-cache"] = "chat"
    """How replicas are chosen for a model that names no profile: `chat` keeps a conversation on one replica and favours
    the one answering soonest, `batch` the shortest queue, `long-context` the most free KV cache, `prefix-cache` the
    replica whose engine holds most of the prompt already (docs/routing.md)."""

    retries: int = 2
    """How many other replicas a request is tried on when one fails before sending anything back."""

    admission: AdmissionSettings = field(default_factory=AdmissionSettings)
    """What happens when every replica of a model is busy."""

    timeouts: Timeouts = field(default_factory=Timeouts)
    """How long the router waits on engines, and on clients."""

    max_connections_per_address: int = 1024
    """The most client connections one address may hold open on a control plane (on each worker process, with
    `workers`); one more is answered 429 and closed. 0 is no cap.
    Addresses in `trusted_proxies` are not capped: their connections carry many clients."""

    breaker: BreakerSettings = field(default_factory=BreakerSettings)
    """When a failing replica is passed over."""

    batch: BatchSettings = field(default_factory=BatchSettings)
    """Files and batches: how large, how many at once (docs/batches.md)."""

    jobs: JobSettings = field(default_factory=JobSettings)
    """Workflow runs as jobs: how many at once, how long kept (docs/media.md)."""

    knowledge: KnowledgeSettings = field(default_factory=KnowledgeSettings)
    """Knowledge bases: which model embeds them (docs/knowledge.md)."""

    def validate(self) -> None:
        for i, entry in enumerate(self.trusted_proxies):
            try:
                ipaddress.ip_network(entry.strip(), strict=False)
            except ValueError:
                raise Invalid(
                    f"trusted_proxies[{i}]",
                    N_('expected an address or CIDR prefix like 10.0.0.0/8, got {entry}'),
                    params={"entry": describe(entry)}
                ) from None
        if self.retries < 0:
            raise Invalid("retries", N_("must be 0 or more, got {value}"), params={"value": self.retries})
        if self.max_connections_per_address < 0:
            raise Invalid("max_connections_per_address", N_('must be 0 or more, got {value}'),
                                                         params={"value": self.max_connections_per_address})
        if self.max_n < 1:
            raise Invalid("max_n", N_('must be 1 or more, got {value}; 1 allows one answer a request'),
                                   params={"value": self.max_n})
        if self.max_body < 1024:
            raise Invalid("max_body", N_('{max_body} is too small for any request; 32MB is the default'),
                                      params={"max_body": self.max_body})


@dataclass(frozen=True)
class Price:
    """Prices in micro-units of the site's currency (millionths), per thousand tokens or per item."""

    prompt_per_1k: int = 0
    """What a thousand prompt tokens cost, in micro-units (1000 is 0.001 a thousand)."""

    cached_per_1k: int = 0
    """What a thousand prompt tokens cost that the engine or provider read from its cache (the answer's
    `cached_tokens`). 0 charges them at `prompt_per_1k`."""

    completion_per_1k: int = 0
    """What a thousand answer tokens cost, in micro-units."""

    per_image: int = 0
    """What one picture made costs, in micro-units."""

    per_mesh: int = 0
    """What one 3D mesh made costs, in micro-units."""

    batch_discount: int = 50
    """The percentage taken off what a line of a batch (`/v1/batches`) costs, 0 to 100: 50 charges a batch line half of
    what the same request costs sent on its own. The usage row carries the discounted cost."""

    def validate(self) -> None:
        for key in ("prompt_per_1k", "cached_per_1k", "completion_per_1k", "per_image", "per_mesh"):
            if getattr(self, key) < 0:
                raise Invalid(key, N_("a price cannot be negative, got {value}"), params={"value": getattr(self, key)})
        if not 0 <= self.batch_discount <= 100:
            raise Invalid("batch_discount", N_("a percentage from 0 to 100, got {value}"),
                          params={"value": self.batch_discount})


@dataclass(frozen=True)
class ExternalKey:
    file: str
    """A file holding one of the provider's keys, on the control plane; re-read when it changes. The rules of
    `api_key_file` apply."""

    weight: float = 1.0
    """Its share of the requests against the other keys'. 0 is 1."""


@dataclass(frozen=True)
class ExternalSettings:
    url: str
    """The provider's OpenAI-compatible base URL, https://api.example.com/v1."""

    model: str = ""
    """The provider's name for the model; empty is the model's own name here."""

    api_key_file: str = ""
    """A file holding the provider's key, on the control plane: a file rather than the key itself, so the key is in
    neither the settings, the store nor the audit log. Empty for a provider that asks for none.
    An absolute path to a file of llmgw's user, readable by it alone (chmod 600), holding the key on one line; never
    one of llmgw's own secrets (the master key, the admin token, TLS keys, the store). Checked when set and at every
    read."""

    api_key_files: list[ExternalKey] = field(default_factory=list)
    """Several keys for the provider, in place of `api_key_file`: each an endpoint of its own (external:MODEL#1, #2…),
    so a key answering 429 or 401 is passed over while its breaker is open and the request goes to another."""

    allow_private_targets: bool = False
    """Let `url` be on this machine (loopback) or at a link-local or cloud metadata address, which are refused otherwise
    — in the settings and at every connection, whatever the host name resolves to.
    Private network addresses (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7) are allowed without it. A model
    served on this machine belongs in `endpoints`, which is sent no key. See docs/security.md."""

    def validate(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise Invalid("url", N_('expected an https:// URL like https://api.example.com/v1, got {url}'),
                                 params={"url": describe(self.url)})
        why = None if self.allow_private_targets else host_refusal(parts.hostname)
        if why is not None:
            raise Invalid("url", N_('{why}; an outside provider is not sent requests and its key there. Set '
                                    'allow_private_targets: true if that provider really is there'),
                                 params={"why": why})
        if self.api_key_file and self.api_key_files:
            raise Invalid("api_key_files", N_("give api_key_file or api_key_files, not both"))


@dataclass(frozen=True)
class ModelSettings:
    name: str
    """The name clients ask for in `model`. Required, and unique among the models."""

    context_length: int = 0
    """The most tokens the model reads and writes in one request, prompt and answer together. 0 is what the engine
    reports. Known here, a request's `max_tokens` that the context cannot hold with the prompt is lowered to the room
    the prompt leaves, and the answer says so (X-Llmgw-Max-Tokens-Lowered)."""

    max_output_tokens: int = 0
    """The longest answer, in tokens, a request may ask for (larger `max_tokens` is refused with a sentence); clients
    see it in /v1/models. 0 is no limit beyond the context."""

    owner: str = "llmgw"
    """Shown to clients as the model's `owned_by` in /v1/models."""

    endpoints: list[str] = field(default_factory=list)
    """Base URLs of OpenAI-compatible engines already serving this model (http://10.0.0.7:8000/v1), used as they are.
    A fixed list, beside any replicas the cluster places itself."""

    source: Literal["", "external"] = ""
    """`external` for a model an outside provider serves (see `external`); empty for one served by engines here."""

    external: ExternalSettings | None = None
    """The outside provider of a `source: external` model."""

    profile: Literal["", "chat", "batch", "long-context", "prefix-cache"] = ""
    """How its replicas are chosen (see `router.default_profile`); empty takes the default. A request may ask for
    another with the `x-llmgw-profile` header."""

    fallbacks: list[str] = field(default_factory=list)
    """Models to answer instead, in order, when this one has no replica with room (every one full, failing or gone)."""

    price: Price = field(default_factory=Price)
    """What its use costs, counted against budgets and in usage."""

    thinking: Literal["", "chat_template_kwargs", "reasoning_effort"] = "chat_template_kwargs"
    """How a request's thinking (Anthropic's `thinking: {type: enabled}`) reaches the engine: `chat_template_kwargs`
    sends `enable_thinking` (Qwen3 and others, on vLLM, SGLang and llama.cpp), `reasoning_effort` sends OpenAI's
    field; empty sends nothing."""

    capabilities: list[Capability] = field(default_factory=list)
    """What it does, of chat, completions, embeddings, vision, tools, thinking, images and workflows; clients see it in
    /v1/models, and a request for anything else is refused with 400 before an engine is asked. Empty: all but workflows
    (an engine llmgw did not start answers for itself), or, with `comfyui`, images and workflows."""

    comfyui: ComfyUIModel | None = None
    """Its `endpoints` are ComfyUI servers, which make pictures from this workflow (docs/media.md): requests to
    /v1/images/generations and /v1/workflows/runs become the workflow's runs there."""

    def validate(self) -> None:
        if not self.name.strip():
            raise Invalid("name", N_("must not be empty; it is what clients ask for"))
        twice = duplicate(self.capabilities)
        if twice:
            raise Invalid("capabilities", N_("{twice} is given twice"), params={"twice": twice})
        for key in ("context_length", "max_output_tokens"):
            if getattr(self, key) < 0:
                raise Invalid(key, N_("must be 0 or more, got {value}"), params={"value": getattr(self, key)})
        if self.context_length and self.max_output_tokens > self.context_length:
            raise Invalid(
                "max_output_tokens",
                N_('{max_output_tokens} is more than context_length ({context_length}); an answer must fit in the '
                   'context'),
                params={"max_output_tokens": self.max_output_tokens, "context_length": self.context_length}
            )
        for i, url in enumerate(self.endpoints):
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise Invalid(f"endpoints[{i}]", N_('expected an http:// or https:// URL like '
                                                    'http://10.0.0.7:8000/v1, got {url}'),
                                                 params={"url": describe(url)})
        if self.source == "external" and self.external is None:
            raise Invalid("external", N_("a source: external model needs external: {url: …}"))
        if self.source != "external" and self.external is not None:
            raise Invalid("source", N_("a model with external: {…} needs source: external"))
        if self.name in self.fallbacks:
            raise Invalid("fallbacks", N_("{name} cannot fall back to itself"), params={"name": self.name})

    @functools.cached_property
    def can(self) -> tuple[str, ...]:
        """Its capabilities in force: as given, or all of them when none are (kept: read on every request)."""
        if self.capabilities:
            return ordered(self.capabilities)
        if self.comfyui is not None:
            return PICTURES if self.comfyui.output == "pictures" else ("workflows",)
        # Workflows are ComfyUI's alone: an engine of the settings' own does all the rest, or says it does not.
        return tuple(c for c in CAPABILITIES if c != "workflows")
