"""Trying a sign-in configuration before it is kept: each step, passed or failed, with one sentence.

`llmgw ctl auth test oidc|ldap`, `POST /api/v1/auth/test/{kind}` and the
admin sign-in page all show the same steps, made by `llmgw.auth.oidc.trial`
and `llmgw.auth.ldap.trial`. A failed step names the cause (an unknown CA, a
certificate without the host in its SANs, a wrong bind DN, a filter that
finds nobody) and what to do; the steps after it are not tried.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Step:
    name: str  # what was tried: "discovery", "bind as the service account", "find ada"
    ok: bool
    detail: str  # what was found, or why it failed and what to do: one sentence, never a secret


@dataclass
class Trial:
    steps: list[Step] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(s.ok for s in self.steps)

    def passed(self, name: str, detail: str) -> None:
        self.steps.append(Step(name, True, detail))

    def failed(self, name: str, detail: str) -> None:
        self.steps.append(Step(name, False, detail))

    def view(self) -> dict[str, Any]:
        return {"ok": self.ok, "steps": [asdict(s) for s in self.steps]}
