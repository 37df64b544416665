"""Sending a call to an endpoint, and to another one when the first fails before its first byte.

Until the engine's first byte has arrived nothing has reached the client,
so a refused connection, a 5xx, a timeout, or a provider key answering 429
or 401 is retried on the next candidate — up to `router.retries` others —
and told to that endpoint's breaker, with the API key that asked when the
failure could be the request's doing (breaker.py says how that counts).
An engine's 4xx and 501 are its refusal of this request: relayed to the
client, never retried, never against the breaker. After the first byte the
answer is the client's, good or bad.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import aiohttp
import orjson

from llmgw.config import Timeouts
from llmgw.events import Events
from llmgw.router import probe, trace
from llmgw.router.call import Call, Refuse
from llmgw.router.endpoint import Endpoint
from llmgw.telemetry import Tracing

log = logging.getLogger("llmgw.upstream")


@dataclass
class Opened:
    """An endpoint that answered, its response, and (for a stream) the first bytes already read."""

    endpoint: Endpoint
    response: aiohttp.ClientResponse
    first: bytes  # the first part of a stream; the whole body of an answer that is not
    took: float  # seconds to that first part
    span: trace.Span | None = None  # this attempt's `upstream` span, ended when the answer is over


class _Failed(Exception):
    def __init__(self, reason: str, status: int | None = None, body: bytes = b"", retry_after: str | None = None,
                 unreachable: bool = False):
        super().__init__(reason)
        self.reason, self.status, self.body, self.retry_after = reason, status, body, retry_after
        # No connection could be made: the engine's failure whatever the request was.
        self.unreachable = unreachable


async def open_upstream(session: aiohttp.ClientSession, call: Call, candidates: list[Endpoint],
                        timeouts: Timeouts, retries: int, take, events: Events | None = None,
                        tracing: Tracing | None = None) -> Opened:
    """The first candidate that answers. `take(endpoint)` claims it (the breaker's trial);
    the caller owns the returned endpoint's in_flight and must release it, and ends its span
    (`trace.end(opened.span)`). An outside provider refusing its key is told to `events` (for
    the notification webhooks). Each attempt is an `upstream` span while the call is traced."""
    last: _Failed | None = None
    tried = 0
    for endpoint in candidates:
        if tried > retries:
            break
        if not take(endpoint):
            continue
        tried += 1
        endpoint.in_flight += 1
        span, traced = (None, {}) if tracing is None else trace.attempt(tracing, call, endpoint)
        try:
            opened = await _send(session, call, endpoint, timeouts, traced)
        except _Failed as failed:
            trace.attempt_failed(span, failed.status, failed.reason)
            endpoint.in_flight -= 1
            last = failed
            if endpoint.external and failed.status in (401, 429):
                endpoint.breaker.trip(failed.reason)
            else:
                asker = None if failed.unreachable else call.principal.key.id
                if endpoint.breaker.failure(failed.reason, asker):
                    probe.check(session, endpoint, failed.reason)
            call.retries.append({"endpoint": endpoint.id, "error": failed.reason})
            if endpoint.external and failed.status == 401:
                # Naming the endpoint, never the key: the notification goes to people.
                log.error("external_key_refused: %s refused its key (401); passed over while its breaker is open",
                          endpoint.id)
                if events is not None:
                    events.emit("external_key_refused", subject=endpoint.id, model=endpoint.model,
                                reason="the provider answered 401 to its key; replace the key file")
            continue
        except BaseException:
            trace.end(span, "cancelled")
            endpoint.in_flight -= 1
            endpoint.breaker.abandon()  # cancelled: no verdict, so a half-open trial is given back
            raise
        endpoint.breaker.success()
        if span is not None:
            trace.attempt_answered(span, opened.response.status, opened.took)
            opened.span = span
        return opened
    raise _refusal(call, last)


def _refusal(call: Call, last: _Failed | None) -> Refuse:
    model = call.model.name
    if last is None:
        return Refuse(503, f"no replica of {model} can take requests now; try again shortly", "no_capacity",
                      headers={"Retry-After": "5"}, decided_by="breaker")
    if last.status == 429:
        return Refuse(429, f"the provider of {model} is at its rate limit; try again shortly", "upstream_rate_limited",
                      headers={"Retry-After": last.retry_after or "5"}, decided_by="upstream_429")
    if last.status == 401:
        return Refuse(502, f"the provider of {model} refused llmgw's key for it; an administrator must replace "
                           "the key file", "external_key_refused", decided_by="upstream_401")
    if last.reason.startswith("timeout"):
        return Refuse(504, f"{model} did not start answering in time; try again, or with a shorter prompt",
                      "upstream_timeout", headers={"Retry-After": "5"}, decided_by="timeout")
    return Refuse(502, f"every replica of {model} tried failed ({last.reason}); try again shortly",
                  "upstream_failed", headers={"Retry-After": "5"}, decided_by="upstream_error")


_timeouts: dict[Timeouts, aiohttp.ClientTimeout] = {}


def _client_timeout(timeouts: Timeouts) -> aiohttp.ClientTimeout:
    """Made once per settings version, not per request."""
    found = _timeouts.get(timeouts)
    if found is None:
        _timeouts.clear()
        found = _timeouts[timeouts] = aiohttp.ClientTimeout(
            total=None, sock_connect=float(timeouts.connect), sock_read=float(timeouts.first_byte))
    return found


async def _send(session: aiohttp.ClientSession, call: Call, endpoint: Endpoint, timeouts: Timeouts,
                traced: dict[str, str]) -> Opened:
    body = dict(call.upstream_body)
    body["model"] = endpoint.upstream_model
    # traced: the attempt's traceparent, so an engine or a provider that traces continues this trace.
    headers = {"Content-Type": "application/json", "X-Request-Id": call.id, **traced}
    if endpoint.api_key:
        headers["Authorization"] = f"Bearer {endpoint.api_key}"
    timeout = _client_timeout(timeouts)
    sent = time.perf_counter()
    try:
        response = await session.post(endpoint.url + call.upstream_path, data=orjson.dumps(body),
                                      headers=headers, timeout=timeout)
    except aiohttp.ConnectionTimeoutError:
        raise _Failed("no connection to the engine in time", unreachable=True) from None
    except TimeoutError:
        raise _Failed("timeout waiting for the engine") from None
    except aiohttp.ClientConnectorError as e:
        raise _Failed(f"connection failed: {type(e).__name__}", unreachable=True) from None
    except aiohttp.ClientError as e:
        raise _Failed(f"connection failed: {type(e).__name__}") from None
    try:
        # 501: the engine does not do what was asked (an endpoint, a parameter): the request's refusal.
        failed = response.status >= 500 and response.status != 501
        if failed or (endpoint.external and response.status in (401, 429)):
            raw = await response.read()
            raise _Failed(f"answered {response.status}", response.status, raw, response.headers.get("Retry-After"))
        if response.status >= 400 or not call.stream:
            first = await response.read()
        else:
            first = await response.content.readany()
            if not first:
                raise _Failed("closed the stream before its first byte")
        return Opened(endpoint, response, first, time.perf_counter() - sent)
    except TimeoutError:
        response.release()
        raise _Failed("timeout waiting for the first byte") from None
    except aiohttp.ClientError as e:
        response.release()
        raise _Failed(f"failed before the first byte: {type(e).__name__}") from None
    except _Failed:
        response.release()
        raise
    except BaseException:
        response.close()
        raise
