"""Guardrails: policies that read prompts and answers, and what they decided.

The router's view of this package:

- `policy.Policies(settings, version)` — which policies apply to a key,
  combined into one `EffectivePolicy` (the strictest wins), cached per key;
- `gate.check_input(effective, body, api)` — reads the prompt, returns the
  body the engine gets (redacted), the decisions, and a refusal or None;
- `gate.OutputChecker` — reads the answer's text as it streams, returns
  what may be released (restored, redacted), and says when to stop;
- `decisions.GuardStats` — counts by rule and action for /metrics.

Detectors (what finds a secret or an e-mail address) are a seam of their
own: `detectors.register`, with llmgw's built-ins in `default_detectors`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmgw.guard import default_detectors as _default_detectors  # noqa: F401  (registers the built-ins)
from llmgw.lazyface import lazy_face

if TYPE_CHECKING:
    from llmgw.guard.decisions import Decision, Decisions, GuardStats
    from llmgw.guard.gate import OutputChecker, check_input
    from llmgw.guard.judge_check import check_speed
    from llmgw.guard.policy import EffectivePolicy, Resolver, baseline_policy, check_detectors, missing_detectors
    from llmgw.guard.review import OutputReview, Reviewers, review_input

__all__ = [
    "Decision", "Decisions", "EffectivePolicy", "GuardStats", "OutputChecker", "OutputReview", "Resolver",
    "Reviewers", "baseline_policy", "check_detectors", "check_input", "check_speed", "missing_detectors",
    "review_input",
]

# The face's names, each imported from its module when first asked for (llmgw/lazyface.py): importing the
# package loads only the detectors, and one name its own module.
__getattr__ = lazy_face(__name__, {
    "decisions": ("Decision", "Decisions", "GuardStats"),
    "gate": ("OutputChecker", "check_input"),
    "judge_check": ("check_speed",),
    "policy": ("EffectivePolicy", "Resolver", "baseline_policy", "check_detectors", "missing_detectors"),
    "review": ("OutputReview", "Reviewers", "review_input"),
})
