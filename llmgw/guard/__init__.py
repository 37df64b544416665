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

from llmgw.guard import default_detectors as _default_detectors  # noqa: F401  (registers the built-ins)
