"""Limits along a key's chain (org, team, project, key): each level only narrows.

The router reads the chain as one `Effective` value, computed once when a
key enters the key cache, so the hot path does no walking. Budgets are not
folded into one figure: a team's monthly budget and a key's daily one are
different money over different time, so each level's budget is checked on
its own (the accounting package counts them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from llmgw.errors import N_, ExpectedError
from llmgw.store import Limits

# From the top of the tree down; a key's chain is always in this order.
CHAIN = ("org", "team", "project", "key")


class LimitError(ExpectedError, ValueError):
    """A limit that cannot be set, said as a sentence (an N_() template and its parameters)."""


@dataclass(frozen=True)
class Budget:
    scope: str
    scope_id: str
    micros: int
    period: str


@dataclass(frozen=True)
class Level:
    """One level's own minute limits, kept beside the folded figures: a team's
    600 a minute is shared by every key under it, so it must be counted on
    the team's own counter, which the smallest figure alone cannot say."""

    scope: str
    scope_id: str
    rpm: int | None = None
    tpm: int | None = None


@dataclass(frozen=True)
class Effective:
    """What a key may do once every level above it has had its say."""

    rpm: int | None = None
    tpm: int | None = None
    models: frozenset[str] | None = None  # None: every model
    expires_at: float | None = None
    budgets: tuple[Budget, ...] = field(default_factory=tuple)
    # Which level set each figure, so a refusal can say "the team's 600 a minute".
    rpm_from: str | None = None
    tpm_from: str | None = None
    # Every level of the chain with an rpm or tpm of its own, top first.
    levels: tuple[Level, ...] = field(default_factory=tuple)
    # The `server.tool` patterns of each level that names tools, top first (docs/mcp.md): a tool is granted
    # where every one of them matches it, and none is granted where no level names any.
    tools: tuple[tuple[str, ...], ...] = field(default_factory=tuple)

    def allows_model(self, model: str) -> bool:
        return self.models is None or model in self.models

    def allows_tool(self, tool: str) -> bool:
        """Whether `tool` (`server.tool`) is granted: unlike models, none granted anywhere is none."""
        from fnmatch import fnmatchcase

        return bool(self.tools) and all(any(fnmatchcase(tool, p) for p in level) for level in self.tools)


def effective(chain: list[Limits | None]) -> Effective:
    """Fold the chain (top first) into what applies: the smallest figure, the
    models every level allows, the earliest expiry, every budget."""
    rpm = tpm = None
    rpm_from = tpm_from = None
    models: frozenset[str] | None = None
    expires_at = None
    budgets: list[Budget] = []
    levels: list[Level] = []
    tools: list[tuple[str, ...]] = []
    for limits in chain:
        if limits is None:
            continue
        if limits.rpm is not None or limits.tpm is not None:
            levels.append(Level(limits.scope, limits.scope_id, limits.rpm, limits.tpm))
        if limits.rpm is not None and (rpm is None or limits.rpm < rpm):
            rpm, rpm_from = limits.rpm, limits.scope
        if limits.tpm is not None and (tpm is None or limits.tpm < tpm):
            tpm, tpm_from = limits.tpm, limits.scope
        if limits.models is not None:
            level = frozenset(limits.models)
            models = level if models is None else models & level
        if limits.tools is not None:
            tools.append(tuple(limits.tools))
        if limits.expires_at is not None and (expires_at is None or limits.expires_at < expires_at):
            expires_at = limits.expires_at
        if limits.budget_micros is not None:
            budgets.append(
                Budget(limits.scope, limits.scope_id, limits.budget_micros, limits.period or "month")
            )
    return Effective(rpm, tpm, models, expires_at, tuple(budgets), rpm_from, tpm_from, tuple(levels), tuple(tools))


def check_narrows(new: Limits, above: list[Limits | None]) -> None:
    """Refuse a level's limits that would widen what a level above allows.

    The fold above would cap them anyway; refusing says so at the moment
    someone believes they are raising a figure, instead of a request later
    being refused by a limit they thought they had lifted.
    """
    for parent in above:
        if parent is None:
            continue
        for name, template in (
            ("rpm", N_("{scope} rpm {mine} is above its {parent}'s {theirs} requests a minute; "
                       "a level can only narrow what the level above it allows")),
            ("tpm", N_("{scope} tpm {mine} is above its {parent}'s {theirs} tokens a minute; "
                       "a level can only narrow what the level above it allows")),
        ):
            mine, theirs = getattr(new, name), getattr(parent, name)
            if mine is not None and theirs is not None and mine > theirs:
                raise LimitError(template, params={"scope": new.scope, "mine": mine,
                                                   "parent": parent.scope, "theirs": theirs})
        if (
            new.budget_micros is not None
            and parent.budget_micros is not None
            and (new.period or "month") == (parent.period or "month")
            and new.budget_micros > parent.budget_micros
        ):
            raise LimitError(
                N_("{scope} budget {mine} a {period} is above its {parent}'s {theirs}; "
                   "a level can only narrow what the level above it allows"),
                params={"scope": new.scope, "mine": format_money(new.budget_micros),
                        "period": new.period or "month", "parent": parent.scope,
                        "theirs": format_money(parent.budget_micros)},
            )
        if new.models is not None and parent.models is not None:
            outside = sorted(set(new.models) - set(parent.models))
            if outside:
                raise LimitError(
                    N_("{scope} models {outside} are not allowed by its {parent} ({allowed}); "
                       "a level can only narrow what the level above it allows"),
                    params={"scope": new.scope, "outside": ", ".join(outside), "parent": parent.scope,
                            "allowed": ", ".join(sorted(parent.models)) or "none"},
                )


def parse_money(text: str) -> int:
    """"12.50" -> 12_500_000 micro-units. Money is never a float in the store."""
    from decimal import Decimal, InvalidOperation

    try:
        value = Decimal(text.strip().lstrip("$"))
    except InvalidOperation:
        raise LimitError(N_('expected an amount of money like 12.50, got "{text}"'),
                         params={"text": text}) from None
    if value < 0:
        raise LimitError(N_("a budget cannot be negative, got {text}"), params={"text": text})
    micros = value * 1_000_000
    if micros != micros.to_integral_value():
        raise LimitError(N_("{text} has more than six decimal places"), params={"text": text})
    return int(micros)


def format_money(micros: int) -> str:
    whole, rest = divmod(micros, 1_000_000)
    if rest == 0:
        return f"{whole}.00"
    text = f"{whole}.{rest:06d}".rstrip("0")
    return text if len(text.split(".")[1]) >= 2 else text + "0"


def describe(limits: Mapping[str, Any] | None) -> list[str]:
    """A level's limits as the admin API gives them, in words, one part each: what `ctl keys`, `ctl tree` and
    the console's People screen show (an empty list: no limits of its own)."""
    limits = limits or {}
    parts = []
    if limits.get("rpm") is not None:
        parts.append(f"{limits['rpm']} requests/min")
    if limits.get("tpm") is not None:
        parts.append(f"{limits['tpm']} tokens/min")
    if limits.get("budget") is not None:
        parts.append(f"budget {limits['budget']} a {limits.get('period') or 'month'}")
    if limits.get("models") is not None:
        parts.append("models " + (", ".join(limits["models"]) or "none"))
    if limits.get("tools") is not None:
        parts.append("tools " + (", ".join(limits["tools"]) or "none"))
    return parts
