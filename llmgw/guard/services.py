"""Outside guardrail services: a site's Lakera, Azure Content Safety or classifier of its own, asked over HTTP.

A policy's `services` are each POSTed the text in a body the site writes
(`{{json .Text}}` puts the text in as a JSON string), with headers read
from files at every call — a rotated key needs no restart — and the JSON
answer is read at two dotted paths: `blocked` says whether the text is
unsafe, `reason` why. The service is told the text and nothing else: no
key, no person, no request id.

What "unsafe" is: true, a number above 0, a non-empty list (or object), or
a string other than "false". A `blocked` path that is missing from the
answer, or null there, is not read as safe: it is "the service did not
say", and the call counts as failed, so the policy's `fail` decides. A
misconfigured path (or a service that changed its answer's shape) would
otherwise let everything through without anyone hearing of it; this way
`fail: closed` refuses and `fail: open` flags, and `service_unavailable`
goes to the webhooks. (The Go original read null as safe until v0.15.1.)

Two policies that name the same service are one call, read as strictly as
either asks: unsafe if either's `blocked` path says so, `block` if either
blocks, both directions if they differ (CHANGELOG v0.15.1: it was asked as
the first policy said).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import aiohttp

from llmgw.config import Service, render_body

if TYPE_CHECKING:
    from llmgw.events import Events

DEFAULT_TIMEOUT = 3.0
MAX_ANSWER_BYTES = 1 << 20  # a guard's verdict is small; a megabyte is something else
REASON_CHARS = 40

# --- reading the answer ----------------------------------------------------------

_MISSING = object()


def lookup(document: Any, path: str) -> Any:
    """The value at a dotted path (numbers for list items: results.0.flagged); _MISSING when absent."""
    value = document
    for part in path.split("."):
        if isinstance(value, dict):
            if part not in value:
                return _MISSING
            value = value[part]
        elif isinstance(value, list):
            if not part.isdigit() or int(part) >= len(value):
                return _MISSING
            value = value[int(part)]
        else:
            return _MISSING
    return value


def says_unsafe(value: Any) -> bool:
    """True, a number above 0, a non-empty list or object, a string other than "false"."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value > 0
    if isinstance(value, (list, dict)):
        return len(value) > 0
    if isinstance(value, str):
        return value.strip().lower() != "false"
    return True  # nothing else comes out of JSON but null, which the caller has already refused


def reason_token(value: Any) -> str:
    """The reason a service gave, as a short token for the rule: "Prompt Injection" -> prompt_injection."""
    if isinstance(value, list):
        value = value[0] if value else None
    if isinstance(value, dict):
        value = next(iter(value), None)  # {"jailbreak": 0.98} names it by its key
    if value is None or isinstance(value, bool):
        return "unsafe"
    token = re.sub(r"[^a-z0-9]+", "_", str(value).lower()).strip("_")[:REASON_CHARS].strip("_")
    return token or "unsafe"


# --- results -------------------------------------------------------------------

@dataclass(frozen=True)
class ServiceVerdict:
    service: str
    safe: bool
    action: Literal["flag", "block"]
    reason: str  # a short token; "unsafe" when the service said no reason; "" when safe
    took: float

    @property
    def rule(self) -> str | None:
        """`service:lakera:prompt_injection`; None when safe."""
        return None if self.safe else f"service:{self.service}:{self.reason or 'unsafe'}"


class ServiceUnavailable(Exception):
    """The service gave no reading: no answer in time, an error, or nothing at the `blocked` path.
    The gate applies the policy's `fail`."""

    def __init__(self, service: str, reason: str, action: str = "block") -> None:
        super().__init__(f"the guardrail service {service} {reason}")
        self.service, self.reason, self.action = service, reason, action


@dataclass
class ServiceResults:
    """What a policy's services said about one text."""

    verdicts: list[ServiceVerdict] = field(default_factory=list)
    unavailable: list[ServiceUnavailable] = field(default_factory=list)

    @property
    def unsafe(self) -> list[ServiceVerdict]:
        return [v for v in self.verdicts if not v.safe]

    @property
    def blocked(self) -> bool:
        return any(v.action == "block" for v in self.unsafe)


# --- one call, read as strictly as every policy naming it asks -----------------------

@dataclass(frozen=True)
class Reading:
    """One call to a service and how its answer is read. Made from a Service, or merged from
    several naming the same one."""

    service: Service  # the url, body and headers sent
    blocked: tuple[str, ...]
    reasons: tuple[str, ...] = ()
    action: Literal["flag", "block"] = "block"
    on: Literal["input", "output", "both"] = "input"
    timeout: float = DEFAULT_TIMEOUT

    @classmethod
    def of(cls, service: Service) -> Reading:
        return cls(service, (service.blocked,), (service.reason,) if service.reason else (),
                   service.action, service.on, float(service.timeout) or DEFAULT_TIMEOUT)

    @property
    def name(self) -> str:
        return self.service.name

    def reads(self, direction: Literal["input", "output"]) -> bool:
        return self.on in (direction, "both")


def _request(service: Service) -> tuple:
    return (service.url, service.body, tuple(sorted(service.header_files.items())))


def merge_services(services: Iterable[Service | Reading]) -> list[Reading]:
    """The calls to make for every policy's services together: one per service name, read as
    strictly as the strictest that names it. Two entries of one name that send different
    requests (url, body or headers) cannot be one call; both are asked, each as it says."""
    merged: dict[tuple, Reading] = {}
    for item in services:
        reading = item if isinstance(item, Reading) else Reading.of(item)
        key = (reading.name, _request(reading.service))
        have = merged.get(key)
        if have is None:
            merged[key] = reading
            continue
        on = have.on if have.on == reading.on else "both"
        merged[key] = replace(
            have,
            blocked=tuple(dict.fromkeys(have.blocked + reading.blocked)),
            reasons=tuple(dict.fromkeys(have.reasons + reading.reasons)),
            action="block" if "block" in (have.action, reading.action) else "flag",
            on=on,
            # The longer wait: a reading the service gives is stricter than the
            # policy's `fail` deciding without one.
            timeout=max(have.timeout, reading.timeout),
        )
    return list(merged.values())


class Services:
    def __init__(self, session: aiohttp.ClientSession, *, events: Events | None = None) -> None:
        self._session = session
        self._events = events

    async def check(self, service: Service | Reading, text: str) -> ServiceVerdict:
        """Ask one service about `text`. Raises ServiceUnavailable when it gives no reading."""
        reading = service if isinstance(service, Reading) else Reading.of(service)
        try:
            return await self._check(reading, text)
        except ServiceUnavailable as e:
            if self._events is not None:
                self._events.emit("service_unavailable", subject=reading.name, service=reading.name,
                                  reason=e.reason)
            raise

    async def check_all(self, services: Sequence[Service | Reading], text: str,
                        direction: Literal["input", "output"]) -> ServiceResults:
        """Every service that reads `direction`, asked at once; those of several policies merged first."""
        readings = [r for r in merge_services(services) if r.reads(direction)]
        results = ServiceResults()
        if not readings:
            return results
        found = await asyncio.gather(*(self.check(r, text) for r in readings), return_exceptions=True)
        for outcome in found:
            if isinstance(outcome, ServiceVerdict):
                results.verdicts.append(outcome)
            elif isinstance(outcome, ServiceUnavailable):
                results.unavailable.append(outcome)
            else:
                raise outcome
        return results

    async def _check(self, reading: Reading, text: str) -> ServiceVerdict:
        name = reading.name
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        headers.update(await asyncio.to_thread(_read_headers, reading.service))
        started = time.perf_counter()
        try:
            async with self._session.post(reading.service.url, data=render_body(reading.service.body, text),
                                          headers=headers,
                                          timeout=aiohttp.ClientTimeout(total=reading.timeout)) as response:
                if response.status // 100 != 2:
                    raise ServiceUnavailable(name, f"answered {response.status}", reading.action)
                raw = await response.content.read(MAX_ANSWER_BYTES + 1)
        except TimeoutError:
            raise ServiceUnavailable(name, f"did not answer within {reading.timeout:g} s", reading.action) from None
        except aiohttp.ClientError as e:
            raise ServiceUnavailable(name, f"could not be reached ({type(e).__name__})", reading.action) from None
        took = time.perf_counter() - started
        if len(raw) > MAX_ANSWER_BYTES:
            raise ServiceUnavailable(name, "answered more than a megabyte", reading.action)
        try:
            answer = json.loads(raw)
        except ValueError:
            raise ServiceUnavailable(name, "answered something that is not JSON", reading.action) from None
        unsafe = False
        for path in reading.blocked:
            value = lookup(answer, path)
            if value is _MISSING or value is None:
                raise ServiceUnavailable(
                    name, f"did not say at {path} whether the text is unsafe (it is "
                          f"{'missing' if value is _MISSING else 'null'} there); is `blocked` the right path?",
                    reading.action)
            unsafe = unsafe or says_unsafe(value)
        if not unsafe:
            return ServiceVerdict(name, True, reading.action, "", took)
        reason = "unsafe"
        for path in reading.reasons:
            value = lookup(answer, path)
            if value is not _MISSING and value is not None:
                reason = reason_token(value)
                break
        return ServiceVerdict(name, False, reading.action, reason, took)


def _read_headers(service: Service) -> dict[str, str]:
    """Each header's value from its file, read now: a key rotated a second ago is the one sent."""
    headers = {}
    for header, path in service.header_files.items():
        try:
            with open(path, encoding="utf-8") as f:
                value = f.read().strip()
        except OSError as e:
            raise ServiceUnavailable(service.name, f"was not asked: its {header} header's file {path} "
                                                   f"cannot be read ({e.strerror or e})", service.action) from None
        if not value:
            raise ServiceUnavailable(service.name, f"was not asked: its {header} header's file {path} is empty",
                                     service.action)
        if "\n" in value or "\r" in value:
            raise ServiceUnavailable(service.name, f"was not asked: its {header} header's file {path} has "
                                                   "more than one line", service.action)
        headers[header] = value
    return headers
