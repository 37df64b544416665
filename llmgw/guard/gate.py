"""The checks the router runs: on the prompt before it goes to the engine, on the answer as it comes back.

The pattern rules only; the judge and outside services are asked by their
own modules with the texts this one reads (`InputResult.last_user`, the
released answer).

Nothing here keeps or returns the text it read other than the request's
own body and answer: decisions hold a rule, an action and a direction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from llmgw.guard import reads
from llmgw.guard.decisions import Decision, Decisions, Refusal, refusal_for
from llmgw.guard.detectors import Match
from llmgw.guard.policy import EffectivePolicy
from llmgw.guard.reads import Path
from llmgw.guard.redact import Redactor, StreamRestorer
from llmgw.guard.rules import CompiledRules, Slot

if TYPE_CHECKING:
    from llmgw.guard.review import OutputReview

# How engines put a message's text parts together: directly (chat
# templates that loop over the parts) or with a newline (vLLM, when the
# template wants one string). A value split across two parts is looked for
# in both, so neither way hands the model a secret the parts hid.
_SEAMS = ("", "\n")

# What the rules found in a text: each match with the rule's actions (CompiledRules.find).
_Found = list[tuple[Match, Slot]]


@dataclass
class InputResult:
    body: dict[str, Any]
    """The body to send on: the caller's own object when nothing changed, a copy otherwise — the caller's is
    never changed."""

    decisions: list[Decision]
    refusal: Refusal | None
    """Set when an enforced rule blocks the request: answer with it (400, guardrail_blocked) and send nothing on."""

    redactor: Redactor = field(default_factory=Redactor)
    """This request's placeholders, for the answer's restore and redaction. In memory only, for the request's life."""

    last_user: str = ""
    """The latest user turn as the model will read it (redacted), for the judge and outside services."""


def _with_changes(body: dict[str, Any], changes: dict[Path, Any]) -> dict[str, Any]:
    """A copy of `body` with `changes` made, copying only the containers on their way."""
    copies: dict[int, Any] = {}

    def own(obj: Any) -> Any:
        copy = copies.get(id(obj))
        if copy is None:
            copy = copies[id(obj)] = dict(obj) if isinstance(obj, dict) else list(obj)
        return copy

    root: dict[str, Any] = own(body)
    for path, value in changes.items():
        node, original = root, body
        for step in path[:-1]:
            original = original[step]
            child = own(original)
            node[step] = child
            node = child
        node[path[-1]] = value
    return root


def _put_system_prompt(body: dict[str, Any], api: str, prompt: str) -> dict[str, Any]:
    if api in ("completions", "embeddings"):
        return body  # no place for a system prompt in these
    if api != "messages" and isinstance(body.get("messages"), list):
        return {**body, "messages": [{"role": "system", "content": prompt}, *body["messages"]]}
    # Anthropic's own shape keeps the system prompt beside the messages;
    # the Responses API calls it instructions.
    key = "instructions" if api == "responses" else "system"
    existing = body.get(key)
    if isinstance(existing, str) and existing:
        return {**body, key: f"{prompt}\n\n{existing}"}
    if isinstance(existing, list):
        return {**body, key: [{"type": "text", "text": prompt}, *existing]}
    return {**body, key: prompt}


def check_input(policy: EffectivePolicy, body: dict[str, Any], api: str) -> InputResult:
    """Read the prompt with the policy's input rules.

    `api` is the shape of `body`: "chat" (and the Anthropic and Responses
    requests once translated to chat), "messages" or "responses" as the
    client sent them, "completions", "embeddings". Every string the engine
    will read is read (llmgw.guard.reads), a message's text parts also as
    one text. Rules run in the order max_chars, deny, secrets, cards, pii,
    injection; the first enforced `block` refuses the request and nothing is
    read after it.
    """
    rules: CompiledRules = policy.input
    decisions = Decisions()
    redactor = Redactor()
    if not rules.active and not policy.system_prompt:
        return InputResult(body, [], None, redactor, _last_user(body, api))
    texts = list(reads.texts(body, api)) if rules.active else []
    if rules.active:
        refusal = _unreadable(rules, body, api, decisions)
        if refusal is not None:
            return InputResult(body, decisions.items, refusal, redactor)
    if rules.max_chars[0] or rules.max_chars[1]:
        length = sum(len(piece) for t in texts for _, piece in t.pieces)
        block = rules.too_long(length, decisions, "input")
        if block is not None:
            return InputResult(body, decisions.items, refusal_for(block), redactor)
    if rules.active and rules.joinable:
        texts = _skip_quiet_strings(rules, texts)
    changes: dict[Path, str] = {}
    last_user = ""
    for text in texts:
        new, block = _scan(rules, text, redactor, decisions)
        if block is not None:
            return InputResult(body, decisions.items, refusal_for(block), redactor)
        for (path, old), piece in zip(text.pieces, new, strict=True):
            if piece is not old and piece != old:
                changes[path] = piece
        if text.role == "user":
            last_user = "\n".join(new)
    out = _with_changes(body, changes) if changes else body
    if policy.system_prompt:
        out = _put_system_prompt(out, api, policy.system_prompt)
    if not rules.active:
        last_user = _last_user(out, api)
    return InputResult(out, decisions.items, None, redactor, last_user)


# Fewer strings than this are read one by one at once.
_FIRST_LOOK = 16


def _skip_quiet_strings(rules: CompiledRules, texts: list[reads.Text]) -> list[reads.Text]:
    """`texts` less the strings outside messages' content when, read together, nothing is found in them.

    A coding agent's request holds hundreds of short strings in its tools'
    schemas, and reading each alone cost more than the whole prompt
    (benchmarks/bench_guard.py, guard_tools_us). Joined by newlines they are
    read at the cost of their length; the patterns find in the joined text
    all they find in each (a newline is a start and an end to every
    built-in pattern, and a site's pattern anchored with ^ or $ turns this
    off), so when nothing is found there is nothing to find one by one.
    When something is, every string is read alone, to know where.
    """
    strings = [t for t in texts if not t.role]
    if len(strings) < _FIRST_LOOK:
        return texts
    if rules.find("\n".join(t.pieces[0][1] for t in strings)):
        return texts
    return [t for t in texts if t.role]


def _unreadable(rules: CompiledRules, body: dict[str, Any], api: str, decisions: Decisions) -> Refusal | None:
    """A refusal for a prompt given as token ids, which no rule can read; None when there is none.

    Only an enforced rule refuses: a policy that only watches records that
    it would have.
    """
    field = reads.unreadable(body, api)
    if field is None:
        return None
    enforced = bool(rules.max_chars[0]) or any(slot.act for _, slot in rules.checks) or any(
        slot.act for slot in rules.deny_slots.values())
    if not enforced:
        decisions.add("token_ids", "would_block", "input")
        return None
    decisions.add("token_ids", "block", "input")
    return Refusal(400, "guardrail_blocked",
                   f"{field} is given as token ids, which the guardrail policy cannot read; "
                   "send it as text (rule token_ids)", "token_ids")


def _scan(rules: CompiledRules, text: reads.Text, redactor: Redactor,
          decisions: Decisions) -> tuple[list[str], Decision | None]:
    """(each piece of `text` as it may go on, the decision that blocks it or None)."""
    out: list[str] = []
    for _, piece in text.pieces:
        found = rules.find(piece, text.identifier)
        if found:
            block, redact = rules.decide(found, decisions, "input", names=text.names)
            if block is not None:
                return out, block
            if redact:
                piece = redactor.apply(piece, redact)
        out.append(piece)
    if len(out) > 1:
        for seam in _SEAMS:
            out, block = _scan_seams(rules, out, seam, redactor, decisions)
            if block is not None:
                return out, block
    return out, None


def _scan_seams(rules: CompiledRules, pieces: list[str], seam: str, redactor: Redactor,
                decisions: Decisions) -> tuple[list[str], Decision | None]:
    """Read `pieces` joined with `seam` for what only their joining makes.

    A value found across pieces and to be redacted leaves its placeholder
    in the piece it began in and is taken out of the pieces after: the
    parts keep their number and order, and the model reads the placeholder
    where the value began.
    """
    joined = seam.join(pieces)
    spans, at = [], 0
    for piece in pieces:
        spans.append((at, at + len(piece)))
        at += len(piece) + len(seam)
    # What the pieces alone set off is already blocked, replaced by its
    # placeholder or recorded once, so whatever is found now is the seam's:
    # a value across two pieces, or one only the other piece's words make
    # (a token after a "Bearer" that ended the part before).
    across = rules.find(joined)
    if not across:
        return pieces, None
    block, redact = rules.decide(across, decisions, "input")
    if block is not None or not redact:
        return pieces, block
    kept, reach = [], -1
    for m in sorted(redact, key=lambda m: m.start):
        if m.start >= reach:
            kept.append(m)
            reach = m.end
    out = []
    for k, (start, end) in enumerate(spans):
        upto = spans[k + 1][0] if k + 1 < len(spans) else len(joined) + 1
        parts, at = [], start
        for m in kept:
            if m.end <= start or m.start >= upto:
                continue
            if m.start > at:
                parts.append(joined[at:min(m.start, end)])
            if m.start >= start:
                parts.append(redactor.placeholder(m.kind, m.value))
            at = max(at, min(m.end, end))
        if at < end:
            parts.append(joined[at:end])
        out.append("".join(parts))
    return out, None


def _last_user(body: dict[str, Any], api: str) -> str:
    last = ""
    for text in reads.texts(body, api):
        if text.role == "user":
            last = "\n".join(piece for _, piece in text.pieces)
    return last


# -- the answer ---------------------------------------------------------------

# Where a sentence ends: . ! ? … (and the CJK ones) before white space, or a
# line's end. An e-mail address's dots and a decimal point are not followed
# by a space, so they never cut a value in two.
_SENTENCE_END = re.compile(r"[.!?…。！？](?=\s)|\n")
# Held without a sentence's end, the answer is released at its last space
# past this many characters, so a model that writes no full stops still
# streams. A value longer than this could be cut in two; none of the rules'
# values (cards, IBANs, keys) come near.
MAX_HELD = 1500
# The released text kept to read the next piece with: a value named by the
# words before it ("Bearer …", "aws_secret_access_key = …", "Dr. …") is
# found though those words already went.
CONTEXT = 48


class _Channel:
    __slots__ = ("restorer", "held", "tool", "context")

    def __init__(self, restorer: StreamRestorer | None, tool: bool):
        self.restorer = restorer
        self.held = ""
        self.tool = tool
        self.context = ""  # the end of what was released, as it was sent


class OutputChecker:
    """Reads one answer's text as it streams: restores, applies the output rules, and says what may be sent.

    The router parses each engine event once and hands over its strings:
    `feed(delta, "content")`, `feed(delta, "reasoning")`, and tool calls'
    arguments as `feed(delta, "tool:0")` (by the call's index). What
    `feed` returns is what to send in that event's place — possibly "",
    when it is held. At the end, `flush()` gives each channel's rest.

    - With nothing reading the answer but `restore`, text is released as
      it comes, less a placeholder's unfinished beginning.
    - Under output rules (or a judge or service on output), released as
      it comes, less what may still become a value a rule finds: the
      rules say where that begins (CompiledRules.pending: a run of digits
      that may be a card, a key's head), and only that is held until what
      follows settles it. Every piece is read by the rules, with the end
      of what went before, before it goes. A policy with a rule that
      cannot say (a site's unbounded `deny` pattern, a plugin's detector
      without `pending`) releases a sentence at a time instead. A tool
      call's arguments are held whole until `flush()`, as a secret in
      JSON must be seen entire.
    - Under `stream: buffer_all`, everything is held until `flush()`.

    An enforced `block` stops the answer: `stopped` is set to its decision,
    nothing more is released, and the router ends the stream with
    finish_reason `content_filter`.
    """

    def __init__(self, policy: EffectivePolicy, redactor: Redactor | None, review: OutputReview | None = None,
                 decisions: Decisions | None = None):
        self.policy = policy
        # The judge and services on the answer (llmgw.guard.review): fed the
        # text as it is released, asked at the end by `finish_review()`.
        self.review = review
        self.rules = policy.output
        self._restore = bool(policy.restore and redactor)
        # Output redaction numbers on from the request's own placeholders,
        # so an address the prompt had is the same [EMAIL_1] in the answer.
        self.redactor = redactor if redactor is not None else Redactor()
        self._reads = policy.reads_output
        self._hold_all = self._reads and policy.stream == "buffer_all"
        self._channels: dict[str, _Channel] = {}
        self._decisions = decisions if decisions is not None else Decisions()
        self._length = 0
        self.stopped: Decision | None = None

    @staticmethod
    def needed(policy: EffectivePolicy | None, redactor: Redactor | None) -> bool:
        """Whether an answer needs reading at all; when not, relay it untouched."""
        return policy is not None and (policy.reads_output or bool(policy.restore and redactor))

    @property
    def decisions(self) -> list[Decision]:
        return self._decisions.items

    def _channel(self, name: str) -> _Channel:
        ch = self._channels.get(name)
        if ch is None:
            tool = name.startswith("tool")
            restorer = StreamRestorer(self.redactor, json_fragment=tool) if self._restore else None
            ch = self._channels[name] = _Channel(restorer, tool)
        return ch

    def feed(self, delta: str, channel: str = "content") -> str:
        if self.stopped is not None or not delta:
            return ""
        ch = self._channel(channel)
        text = ch.restorer.feed(delta) if ch.restorer is not None else delta
        if not self._reads:
            return text
        before = len(ch.held)
        ch.held += text
        if self._hold_all or ch.tool or not ch.held:
            return ""
        if self.rules.windowed:
            return self._release_window(ch)
        # Only the new text can hold a new sentence end (one character back:
        # a "." held waits for the space that says it ends a sentence).
        cut = _sentence_cut(ch.held, max(0, before - 1))
        if cut == 0:
            return ""
        ready, ch.held = ch.held[:cut], ch.held[cut:]
        return self._check(ready, ch)

    def _release_window(self, ch: _Channel) -> str:
        """What of `ch.held` may go now: up to where a value may still be in progress, and never
        through a value already whole (that waits, to go at once masked or to stop the answer).

        The held text is read once, with the end of what was released before it, and what is
        found there decides the piece that goes."""
        rules = self.rules
        if not rules.active:  # only a judge or a service reads the answer: nothing to hold for
            ready, ch.held = ch.held, ""
            return self._check(ready, ch)
        shift = len(ch.context)
        text = ch.context + ch.held
        at = rules.pending(text)
        if at <= shift:
            if len(ch.held) <= MAX_HELD:
                return ""
            at = shift + _sentence_cut(ch.held)  # a run past any value's length: as sentence release did
        found = rules.find(text)
        for m, _ in found:
            if m.start < at < m.end:
                at = m.start
        if at <= shift:
            return ""
        ready, ch.held = ch.held[:at - shift], ch.held[at - shift:]
        return self._check(ready, ch, [(m, slot) for m, slot in found if m.end > shift and m.start < at])

    def flush(self) -> dict[str, str]:
        """Each channel's rest, read by the rules; {} when the answer was stopped."""
        out: dict[str, str] = {}
        for name in list(self._channels):
            text = self._flush(name)
            if self.stopped is not None:
                return {}
            if text:
                out[name] = text
        return out

    def whole(self, text: str, channel: str = "content") -> str:
        """A whole answer's text for one channel (an answer not streamed); "" when stopped."""
        first = self.feed(text, channel)
        rest = self._flush(channel)
        return "" if self.stopped is not None else first + rest

    def _flush(self, name: str) -> str:
        ch = self._channels.get(name)
        if ch is None or self.stopped is not None:
            return ""
        text = ch.held + (ch.restorer.flush() if ch.restorer is not None else "")
        ch.held = ""
        if not text or not self._reads:
            return text
        return self._check(text, ch)

    def poll(self) -> bool:
        """Whether the answer has been stopped, a background judgment included. Cheap: read between events."""
        if self.stopped is None and self.review is not None:
            self.stopped = self.review.poll()
        return self.stopped is not None

    async def finish_review(self) -> None:
        """The judge's last judgment and the services on the whole answer; sets `stopped` when one objects.
        Call after `flush()` (or `whole()`), before the answer's end is sent."""
        if self.review is not None and self.stopped is None:
            self.stopped = await self.review.finish()

    def cancel(self) -> None:
        """The client went away: stop asking the judge."""
        if self.review is not None:
            self.review.cancel()

    def _check(self, text: str, ch: _Channel, found: _Found | None = None) -> str:
        new = self._rules(text, ch.context, found)
        ch.context = (ch.context + new)[-CONTEXT:]
        if new and self.review is not None and self.stopped is None:
            self.review.feed(self.redactor.conceal(new) if self._restore else new)
            self.poll()
            if self.stopped is not None:
                return ""
        return new

    def _rules(self, text: str, context: str = "", found: _Found | None = None) -> str:
        """`text` as it may go, read with the `context` released before it: a value that the context
        names ("Bearer …") is found, and only what lies in `text` is masked. `found`: what the rules
        found in context + text, when the caller has read it already."""
        rules = self.rules
        if not rules.active:
            return text
        self._length += len(text)
        if rules.max_chars[0] or rules.max_chars[1]:
            block = rules.too_long(self._length, self._decisions, "output")
            if block is not None:
                self.stopped = block
                return ""
        if not context and found is None:
            new, block = rules.scan(text, self.redactor, self._decisions, "output")
        else:
            new, block = self._scan_after(text, context, found)
        if block is not None:
            self.stopped = block
            return ""
        return new

    def _scan_after(self, text: str, context: str, found: _Found | None) -> tuple[str, Decision | None]:
        shift = len(context)
        if found is None:
            found = [(m, slot) for m, slot in self.rules.find(context + text) if m.end > shift]
        if not found:
            return text, None
        block, redact = self.rules.decide(found, self._decisions, "output")
        if block is not None or not redact:
            return text, block
        # A value begun in the context (already sent) is masked from where this text begins.
        moved = [replace(m, start=max(m.start - shift, 0), end=m.end - shift) for m in redact]
        return self.redactor.apply(text, moved), None


def _sentence_cut(held: str, start: int = 0) -> int:
    """How much of `held` ends in a whole sentence (0: none yet), looking from `start`."""
    last = None
    for match in _SENTENCE_END.finditer(held, start):
        last = match
    if last is not None:
        return last.end()
    if len(held) > MAX_HELD:
        space = held.rfind(" ")
        return space + 1 if space > 0 else len(held)
    return 0
