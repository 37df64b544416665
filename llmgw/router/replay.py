"""A kept answer given again: in the client's API shape, streamed or not, whichever way it was first asked.

The answer cache (llmgw.router.cache) holds the engine's JSON; the shape
(llmgw.router.apis) turns it into the body or the Server-Sent Events a
fresh answer in the asked shape would have been, through the same
translators a live stream goes through, so a replayed answer cannot drift
from a fresh one.
"""

from __future__ import annotations

from llmgw.router.apis import by_api
from llmgw.router.cache import Entry
from llmgw.router.wire import JSON


def replay_json(entry: Entry, api: str, *, model: str = "", request: JSON | None = None) -> bytes:
    """The answer as an unstreamed response body in `api`'s shape.

    `model` is the name the client asked for and `request` the client's own
    body: the messages and responses shapes echo them (thinking shown or
    not, the Responses settings) as a fresh answer would.
    """
    _same_api(entry, api)
    return by_api(api).replay_json(entry.answer, model=model, request=request or {})


def replay_stream(entry: Entry, api: str, *, model: str = "", request: JSON | None = None,
                  include_usage: bool = False) -> bytes:
    """The whole answer as one write of Server-Sent Events in `api`'s shape, ending as a stream ends.

    Chat and completions get the engine's chunk events and `data: [DONE]`
    (the usage event only with `include_usage`, as stream_options asked);
    messages and responses get their own events, rendered by the same
    translators a live stream goes through.
    """
    _same_api(entry, api)
    return by_api(api).replay_stream(entry.answer, model=model, request=request or {}, include_usage=include_usage)


def _same_api(entry: Entry, api: str) -> None:
    if entry.api != api:
        # The API shape is part of the key, so only a caller's mistake gets here.
        raise ValueError(f"this answer was kept for the {entry.api} API, not {api}")
