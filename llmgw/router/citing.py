"""A streamed answer from knowledge bases ends with where it came from, as a whole answer says it.

The citations are known only once the whole text is (each [n] the model
wrote names a passage), so the answer is read as it passes, and a chunk
carrying `delta.annotations` (llmgw's file_citation, as on a whole answer's
message) goes out just before `data: [DONE]`, after the finish and usage
chunks: a client that reads to [DONE] gets it, and one that does not know the
field passes over it. A /v1/responses stream's `response.completed` event
carries its response annotated as a whole one is (the file_search_call item
first, the file_citation annotations on its text), which is what the SDKs'
final response is read from. Only the requests that named knowledge bases
pay for the reading.
"""

from __future__ import annotations

from typing import Any

import orjson

from llmgw.router.assembly import Assembler
from llmgw.router.augmenting import Augmenting
from llmgw.router.relay import DONE

COMPLETED = b"event: response.completed\n"


class StreamCitations:
    def __init__(self, augmenting: Augmenting, api: str, retrieved: Any) -> None:
        self.augmenting, self.api, self.retrieved = augmenting, api, retrieved
        self.read = Assembler()
        self.sent = False

    def cite(self, out: bytes) -> bytes:
        """`out` as the client is sent it, with the citations put in before [DONE] when it holds that."""
        if self.api == "responses":
            return self._cite_completed(out)
        at = out.find(DONE) if not self.sent else -1
        if at < 0:
            if not self.sent:
                self.read.feed_sse(out)
            return out
        self.sent = True
        self.read.feed_sse(out[:at])
        event = self.augmenting.cited_event(self.api, self.read.answer(require_done=False), self.retrieved)
        return out[:at] + event + out[at:]

    def _cite_completed(self, out: bytes) -> bytes:
        """A /v1/responses stream's response.completed event, its response annotated as a whole one would be."""
        at = out.find(COMPLETED) if not self.sent else -1
        if at < 0:
            return out
        end = out.find(b"\n\n", at)
        end = len(out) if end < 0 else end
        lines = out[at:end].split(b"\n")
        data = next((line[5:].strip() for line in lines if line.startswith(b"data:")), b"")
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            return out
        if not isinstance(event, dict) or not isinstance(event.get("response"), dict):
            return out
        self.sent = True
        event["response"] = self.augmenting.annotate(self.api, event["response"], self.retrieved)
        return out[:at] + COMPLETED + b"data: " + orjson.dumps(event) + out[end:]
