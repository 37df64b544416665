"""A streamed chat answer from knowledge bases ends with where it came from: one chunk before its [DONE].

The citations are known only once the whole text is (each [n] the model
wrote names a passage), so the answer is read as it passes, and a chunk
carrying `delta.annotations` (llmgw's file_citation, as on a whole answer's
message) goes out just before `data: [DONE]`, after the finish and usage
chunks: a client that reads to [DONE] gets it, and one that does not know the
field passes over it. Only the requests that named knowledge bases pay for
the reading.
"""

from __future__ import annotations

from typing import Any

from llmgw.router.assembly import Assembler
from llmgw.router.augmenting import Augmenting
from llmgw.router.relay import DONE


class StreamCitations:
    def __init__(self, augmenting: Augmenting, api: str, retrieved: Any) -> None:
        self.augmenting, self.api, self.retrieved = augmenting, api, retrieved
        self.read = Assembler()
        self.sent = False

    def cite(self, out: bytes) -> bytes:
        """`out` as the client is sent it, with the citations put in before [DONE] when it holds that."""
        at = out.find(DONE) if not self.sent else -1
        if at < 0:
            if not self.sent:
                self.read.feed_sse(out)
            return out
        self.sent = True
        self.read.feed_sse(out[:at])
        event = self.augmenting.cited_event(self.api, self.read.answer(require_done=False), self.retrieved)
        return out[:at] + event + out[at:]
