"""The account package's refusal and who asked: shared by its services (service.py, people.py, sessions.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from llmgw.errors import ExpectedError


class AccountError(ExpectedError, ValueError):
    """A refused change, said as a sentence; `status` is the HTTP status that fits it."""

    def __init__(self, message: str, status: int = 400, code: str = "invalid_request", *,
                 params: Mapping[str, object] | None = None):
        super().__init__(message, params=params)
        self.status = status
        self.code = code


@dataclass(frozen=True)
class Actor:
    """Who asked, for the audit log: "root" via "cli", "alice@example.com" via "portal"."""

    name: str
    via: str
