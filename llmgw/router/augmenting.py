"""What the request path asks of knowledge bases (router/knowledge/augment.py), which it cannot import.

The knowledge package sends its own embeddings through handlers.serve, so
handlers reaches it through this Protocol, set on the Router when the
client app starts: None until then, and in a router without the client app.
"""

from __future__ import annotations

from typing import Any, Protocol

from llmgw.account import Principal


class Augmenting(Protocol):
    def asks(self, api: str, body: Any) -> bool:
        """Whether the request names knowledge bases (a dictionary lookup: what every other request pays)."""
        ...

    async def augment(self, principal: Principal, api: str, body: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """The body with the passages put before the model, and what was retrieved (None: nothing asked)."""
        ...

    def annotate(self, api: str, answer: dict[str, Any], retrieved: Any) -> dict[str, Any]:
        """The whole answer with where it came from."""
        ...

    def cited_event(self, api: str, answer: dict[str, Any] | None, retrieved: Any) -> bytes:
        """The SSE event a streamed answer ends with, before its [DONE]: its citations (b"": none)."""
        ...
