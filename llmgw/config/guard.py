"""Guardrails' settings: policies by name, which apply where, and what each rule does.

Part of the cluster's settings (`guard:`), changed live like the rest. The
string under each field is its entry in docs/reference.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

from llmgw.config.bodytemplate import validate_body_template
from llmgw.config.loader import Invalid
from llmgw.config.types import Duration, describe
from llmgw.errors import N_

Action = Literal["flag", "redact", "block"]
PII_KINDS = ("email", "phone", "iban", "national_id", "person")
SECRET_KINDS = ("provider_keys", "private_keys", "bearer_tokens", "url_passwords")


@dataclass(frozen=True)
class Pattern:
    name: str
    """What the rule is called in decisions and metrics (`deny:NAME`)."""

    regex: str
    """A Python regular expression, matched against the text as the model reads it (case-insensitive)."""

    action: Action = "block"
    """What a match does: `flag` records it, `redact` replaces it with a placeholder, `block` refuses the text."""

    def validate(self) -> None:
        try:
            re.compile(self.regex)
        except re.error as e:
            raise Invalid("regex", N_("is not a regular expression: {e}"), params={"e": e}) from None


@dataclass(frozen=True)
class Rules:
    """What one direction of a policy (the prompt on `input`, the answer on `output`) checks."""

    secrets: Literal["", "flag", "redact", "block"] = ""
    """API keys of the common providers, private keys, bearer tokens and passwords in URLs: what to do with them. Empty
    checks none."""

    cards: Literal["", "flag", "redact", "block"] = ""
    """Payment card numbers (Luhn-checked, so order numbers are left alone). Empty checks none."""

    pii: dict[str, Action] = field(default_factory=dict)
    """Personal data by kind — email, phone, iban, national_id (TR and the EU's common formats), person (names) — each
    with its action."""

    injection: Literal["", "flag", "block"] = ""
    """Phrases that try to override the system prompt ("ignore all previous instructions"). Empty checks none."""

    deny: list[Pattern] = field(default_factory=list)
    """A site's own patterns."""

    detectors: dict[str, Action] = field(default_factory=dict)
    """Detectors that plugins add (docs/plugins.md), by kind, each with its action: {profanity: block}. A kind no
    installed plugin gives is refused when the settings are changed."""

    max_chars: int = 0
    """Refuses text longer than this; 0 is no limit."""

    restore: bool = False
    """On input: the values `redact` took out are put back into the answer (the model reads "[EMAIL_1]", the client its
    own address). Only that request's values, only in memory."""

    def validate(self) -> None:
        for kind in self.pii:
            if kind not in PII_KINDS:
                raise Invalid(f"pii.{kind}", N_('is not a kind of personal data; the kinds are {kinds}'),
                                             params={"kinds": ', '.join(PII_KINDS)})
        for kind in self.detectors:
            if kind in PII_KINDS:
                raise Invalid(f"detectors.{kind}", N_("is llmgw's own; set it as pii.{kind}"), params={"kind": kind})
            if kind in ("secrets", "cards", "injection", "deny"):
                raise Invalid(f"detectors.{kind}", N_("is llmgw's own; set it as {kind}"), params={"kind": kind})
        if self.max_chars < 0:
            raise Invalid("max_chars", N_("must be 0 or more, got {value}"), params={"value": self.max_chars})


@dataclass(frozen=True)
class JudgePolicy:
    model: str
    """The catalog's judge model (a Qwen3Guard-Gen), asked on the gateway's own account."""

    categories: list[str] = field(default_factory=lambda: [
        "Violent", "Non-violent Illegal Acts", "Sexual Content or Sexual Acts", "PII", "Suicide & Self-Harm",
        "Unethical Acts", "Politically Sensitive Topics", "Copyright Violation", "Jailbreak"])
    """The categories that make a text unsafe for this policy; a judgment naming only others is safe."""

    on: Literal["input", "output", "both"] = "input"
    """Which direction the judge reads."""

    action: Literal["flag", "block"] = "block"
    """What an unsafe judgment does."""

    controversial: Literal["safe", "unsafe"] = "safe"
    """How a `Controversial` judgment counts."""

    latency_budget: Duration = Duration("5s")
    """How long a judgment may take, retries on other replicas included, before the policy's `fail` decides."""


@dataclass(frozen=True)
class Service:
    name: str
    """Says which service decided, in the decision's rule (`service:NAME:REASON`)."""

    url: str
    """Where the body is POSTed."""

    header_files: dict[str, str] = field(default_factory=dict)
    """Headers whose values are read from files at each call, so a rotated key needs no restart: {Authorization:
    /etc/llmgw/secrets/lakera}."""

    body: str = ""
    """The request, a template given the text: `{{json .Text}}` writes it as a JSON string. Empty sends {"input":
    TEXT}."""

    blocked: str = ""
    """Where in the answer the service says the text is unsafe: a dotted path, numbers for list items
    (results.0.flagged). True, a number above 0, a non-empty list or a string other than "false" is unsafe."""

    reason: str = ""
    """Where it says why, for the decision's rule; optional."""

    on: Literal["input", "output", "both"] = "input"
    """Which direction the service reads; on output it reads the whole answer once, at its end."""

    action: Literal["flag", "block"] = "block"
    """What an unsafe answer does."""

    timeout: Duration = Duration("3s")
    """How long one call may take; past it the policy's `fail` decides."""

    def validate(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise Invalid("url", N_("expected an http(s) URL, got {url}"), params={"url": describe(self.url)})
        if not self.blocked:
            raise Invalid("blocked", N_("must say where the service's answer says the text is unsafe"))
        validate_body_template(self.body)


@dataclass(frozen=True)
class Policy:
    mode: Literal["enforce", "observe"] = "enforce"
    """`enforce` acts on what the rules find; `observe` only records what they would have done."""

    fail: Literal["open", "closed"] = "open"
    """When the judge or a service cannot answer: `open` lets the text through (flagged), `closed` refuses it with
    503."""

    no_store: bool = False
    """Nothing of what this policy covers is kept: no answer cache, no stored conversation."""

    input: Rules = field(default_factory=Rules)
    """The rules the prompt is read with."""

    output: Rules = field(default_factory=Rules)
    """The rules the answer is read with."""

    system_prompt: str = ""
    """A system prompt put first in every request this policy covers."""

    require_capabilities: bool = False
    """Refuse a request that asks for what the model does not do (pictures to a text model, tools to one without tool
    calls)."""

    validate_structured: bool = False
    """Check an answer asked for with a `response_format` JSON schema against that schema."""

    judge: JudgePolicy | None = None
    """A judge model that reads the text too."""

    services: list[Service] = field(default_factory=list)
    """Outside guardrails asked over HTTP, before the judge."""

    stream: Literal["sentence", "buffer_all"] = "sentence"
    """How a streamed answer under output checks is released: `sentence` (the name it always had), as it comes less
    what may still become a value a rule finds (a sentence at a time where a rule cannot say how long its values
    are), stopped with content_filter when a check objects; or `buffer_all`, held whole until judged."""


@dataclass(frozen=True)
class Attachment:
    scope: Literal["org", "team", "project", "key"]
    """The level of the tree the policy is attached to."""

    id: str
    """Its id, or its name path (Acme, Acme/ml, Acme/ml/chat)."""

    policies: list[str] = field(default_factory=list)
    """The policies that apply there too; the strictest of all that apply wins."""


@dataclass(frozen=True)
class GuardSettings:
    enabled: bool = True
    """Whether guardrails run at all. Off, no policy is read."""

    default: list[str] = field(default_factory=list)
    """The policies that apply to every request."""

    policies: dict[str, Policy] = field(default_factory=dict)
    """Policies by name."""

    attach: list[Attachment] = field(default_factory=list)
    """Policies that apply to part of the tree only."""

    def validate(self) -> None:
        for i, name in enumerate(self.default):
            if name not in self.policies:
                raise Invalid(f"default[{i}]", N_("{name} is not one of the policies"), params={"name": name})
        for i, attachment in enumerate(self.attach):
            for j, name in enumerate(attachment.policies):
                if name not in self.policies:
                    raise Invalid(f"attach[{i}].policies[{j}]", N_('{name} is not one of the policies'),
                                                                params={"name": name})
