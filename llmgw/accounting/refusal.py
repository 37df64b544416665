"""A request refused by a limit or a budget, said so a person can act on it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmgw.account import Principal


@dataclass(frozen=True)
class Refusal:
    """Why a request may not go now, and when it may.

    `status` is what the client API answers: 429 for a rate limit (the
    OpenAI SDK waits Retry-After and tries again, which is right for a
    minute that will have room), 402 for a spent budget (it would retry a
    429 too, and a budget does not come back in seconds).
    """

    code: str  # "rate_limited" or "budget_exceeded"
    message: str
    scope: str  # the level that decided: org, team, project or key
    scope_id: str
    retry_after: int  # whole seconds, at least 1
    status: int


def level_name(principal: Principal, scope: str) -> str:
    """ "the team Acme/ml": a level as the person who set its limit knows it."""
    path = principal.path
    if scope == "org":
        return f"the org {path.org.name}"
    if scope == "team":
        return f"the team {path.org.name}/{path.team.name}"
    if scope == "project":
        return f"the project {path}"
    return f"the key {principal.key.name}"
