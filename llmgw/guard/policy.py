"""Which policies apply to a request, combined into the one it is read with.

`guard.default` applies to every request; `guard.attach` adds policies to
an org, a team, a project or a key, named by id or by name path (Acme,
Acme/ml, Acme/ml/chat, Acme/ml/chat/ci-key). All that apply are combined,
the strictest winning rule by rule (see `combine_policies`). The hot path
asks `Resolver.effective(...)`, which costs a dict lookup: the combination
is made once per key and per version of the settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from llmgw.account import Principal
from llmgw.config import GuardSettings, Invalid, JudgePolicy, Policy, Rules, Service
from llmgw.errors import N_
from llmgw.guard import detectors
from llmgw.guard.decisions import RANK
from llmgw.guard.rules import CompiledRules, Slot, combine

T = TypeVar("T")

# Keys seen since the settings last changed; past this many the cache
# starts again rather than growing with every key ever used.
MAX_CACHED_KEYS = 50_000

# The judge's categories the baseline refuses: Qwen3Guard-Gen's, less
# "Politically Sensitive Topics" and "Copyright Violation", which catch too
# much ordinary work (elections, quoting a licence).
BASELINE_JUDGE_CATEGORIES = [
    "Violent", "Non-violent Illegal Acts", "Sexual Content or Sexual Acts", "PII", "Suicide & Self-Harm",
    "Unethical Acts", "Jailbreak"]


@dataclass(frozen=True)
class Sourced(Generic[T]):
    """A judge or a service, with the policy that asks for it and that policy's mode."""

    policy: str
    mode: str
    item: T


@dataclass(frozen=True)
class EffectivePolicy:
    """Every policy that applies to one request, as one."""

    names: tuple[str, ...]
    mode: str
    """"enforce" when any of them enforces anything; "observe" when all only watch."""
    fail: str
    no_store: bool
    input: CompiledRules
    output: CompiledRules
    restore: bool
    system_prompt: str
    require_capabilities: bool
    validate_structured: bool
    judges: tuple[Sourced[JudgePolicy], ...]
    services: tuple[Sourced[Service], ...]
    stream: str

    @property
    def reads_output(self) -> bool:
        """Whether anything reads the answer: its rules, a judge or a service on output."""
        return (self.output.active or any(j.item.on != "input" for j in self.judges)
                or any(s.item.on != "input" for s in self.services))


def _rules_slots(rules: Sequence[tuple[Rules, bool]]) -> dict[str, Slot]:
    kinds: dict[str, tuple[list[str], list[str]]] = {}

    def put(kind: str, action: str, enforce: bool) -> None:
        if action:
            kinds.setdefault(kind, ([], []))[0 if enforce else 1].append(action)

    for r, enforce in rules:
        put("secrets", r.secrets, enforce)
        put("cards", r.cards, enforce)
        put("injection", r.injection, enforce)
        for kind, action in (*r.pii.items(), *r.detectors.items()):
            put(kind, action, enforce)
    return {kind: combine(*acts) for kind, acts in kinds.items()}


def missing_detectors(guard: GuardSettings) -> list[tuple[str, str]]:
    """(the settings' key, the kind) for each detector a policy names that none is registered for.

    A policy's rule whose detector is not there checks nothing, so a plugin
    missing or failed to load would let through what the policy is meant to
    stop: the admin API refuses such a change, and the server warns at start.
    """
    return [(f"guard.policies.{name}.{direction}.detectors.{kind}", kind)
            for name, policy in guard.policies.items() for direction in ("input", "output")
            for kind in getattr(policy, direction).detectors if detectors.get(kind) is None]


def check_detectors(guard: GuardSettings) -> None:
    """Refuse settings whose policies name a detector no plugin gives (Invalid, naming the key)."""
    missing = missing_detectors(guard)
    if missing:
        key, kind = missing[0]
        raise Invalid(key, N_("no installed plugin gives a detector of kind {kind!r}; the kinds are "
                              "{kinds} (`llmgw doctor` lists the plugins and any that failed)"),
                      params={"kind": kind, "kinds": ", ".join(detectors.kinds())})


def _smallest(limits: Sequence[int]) -> int:
    return min((n for n in limits if n > 0), default=0)


def _compile(rules: Sequence[tuple[Rules, bool]]) -> CompiledRules:
    act = _smallest([r.max_chars for r, enforce in rules if enforce])
    watch = _smallest([r.max_chars for r, enforce in rules if not enforce])
    if act and watch >= act:
        watch = 0
    deny = [(p, enforce) for r, enforce in rules for p in r.deny]
    return CompiledRules(_rules_slots(rules), deny, (act, watch))


def _redacts(rules: Rules) -> bool:
    actions = [rules.secrets, rules.cards, *rules.pii.values(), *rules.detectors.values(),
               *(p.action for p in rules.deny)]
    return "redact" in actions


def combine_policies(named: Sequence[tuple[str, Policy]]) -> EffectivePolicy:
    """The strictest of `named`, rule by rule.

    Per rule, block > redact > flag > off, with an enforced action beating
    an observed one (which is still recorded when stricter); `fail: closed`
    over open; `no_store` if any says so; the smallest `max_chars` above 0;
    deny patterns, judges and services all together; `restore` when a
    policy that redacts asks for it; `buffer_all` over `sentence`; system
    prompts one after another, each once.
    """
    policies = [p for _, p in named]
    prompts: list[str] = []
    for p in policies:
        if p.system_prompt and p.system_prompt not in prompts:
            prompts.append(p.system_prompt)
    return EffectivePolicy(
        names=tuple(name for name, _ in named),
        mode="enforce" if any(p.mode == "enforce" for p in policies) else "observe",
        fail="closed" if any(p.fail == "closed" for p in policies) else "open",
        no_store=any(p.no_store for p in policies),
        input=_compile([(p.input, p.mode == "enforce") for p in policies]),
        output=_compile([(p.output, p.mode == "enforce") for p in policies]),
        restore=any(p.input.restore and _redacts(p.input) for p in policies),
        system_prompt="\n\n".join(prompts),
        require_capabilities=any(p.require_capabilities for p in policies),
        validate_structured=any(p.validate_structured for p in policies),
        judges=tuple(Sourced(name, p.mode, p.judge) for name, p in named if p.judge is not None),
        services=tuple(Sourced(name, p.mode, s) for name, p in named for s in p.services),
        stream="buffer_all" if any(p.stream == "buffer_all" for p in policies) else "sentence",
    )


class Policies:
    """One version of the guard settings, indexed for lookups by key."""

    def __init__(self, settings: GuardSettings, version: int = 0):
        self.settings = settings
        self.version = version
        self._attached: dict[tuple[str, str], list[str]] = {}
        for a in settings.attach:
            self._attached.setdefault((a.scope, a.id), []).extend(a.policies)
        self._by_key: dict[tuple, EffectivePolicy | None] = {}
        self._by_names: dict[tuple[str, ...], EffectivePolicy | None] = {}

    def names_for(self, principal: Principal) -> tuple[str, ...]:
        """The policies that apply to `principal`'s requests: default, then org, team, project, key."""
        path, key = principal.path, principal.key
        org, team, project = path.org.name, f"{path.org.name}/{path.team.name}", str(path)
        names = list(self.settings.default)
        for scope, ids in (("org", (path.org.id, org)), ("team", (path.team.id, team)),
                           ("project", (path.project.id, project)), ("key", (key.id, f"{project}/{key.name}"))):
            for ident in ids:
                names.extend(self._attached.get((scope, ident), ()))
        return tuple(dict.fromkeys(names))

    def for_names(self, names: tuple[str, ...]) -> EffectivePolicy | None:
        if names not in self._by_names:
            named = [(n, self.settings.policies[n]) for n in names if n in self.settings.policies]
            self._by_names[names] = combine_policies(named) if named else None
        return self._by_names[names]

    def for_principal(self, principal: Principal) -> EffectivePolicy | None:
        """The effective policy for a key's request, or None when no policy applies (nothing to do)."""
        if not self.settings.enabled:
            return None
        path, key = principal.path, principal.key
        # Names are in the cache key as well as the id: attachments may be
        # by name, and a renamed team comes back from the key cache as a
        # new Principal under the same key id.
        cache_key = (key.id, key.name, path.org.id, path.org.name, path.team.id, path.team.name,
                     path.project.id, path.project.name)
        if cache_key in self._by_key:
            return self._by_key[cache_key]  # None too: no policy applies to this key
        if len(self._by_key) >= MAX_CACHED_KEYS:
            self._by_key.clear()
        effective = self.for_names(self.names_for(principal))
        self._by_key[cache_key] = effective
        return effective


class Resolver:
    """The router's handle: the effective policy for a request, rebuilt when the settings' version moves."""

    def __init__(self) -> None:
        self._policies: Policies | None = None

    def effective(self, settings: GuardSettings, version: int, principal: Principal) -> EffectivePolicy | None:
        policies = self._policies
        if policies is None or policies.version != version or policies.settings is not settings:
            policies = self._policies = Policies(settings, version)
        return policies.for_principal(principal)


def baseline_policy(judge_model: str = "", categories: Sequence[str] = BASELINE_JUDGE_CATEGORIES) -> dict[str, Any]:
    """The `baseline` policy `server init` installs, as it is written under `guard.policies`.

    Secrets refused both ways, card numbers masked both ways, injection
    attempts recorded. The judge is there only when init has one to name
    (`judge_model`); it then reads both ways and fails closed, as a judge
    that cannot answer is no reason to serve unjudged text.
    """
    policy: dict[str, Any] = {
        "mode": "enforce",
        "fail": "closed" if judge_model else "open",
        "input": {"secrets": "block", "cards": "redact", "injection": "flag"},
        "output": {"secrets": "block", "cards": "redact"},
    }
    if judge_model:
        policy["judge"] = {"model": judge_model, "categories": list(categories), "on": "both", "action": "block"}
    return policy


def strictest(a: str, b: str) -> str:
    """The stricter of two actions ("" is none)."""
    return a if RANK[a] >= RANK[b] else b
