"""Server-Sent Events as engines send them: the one reader of a stream's events in the router.

The relay, the answer cache's assembly and the answer-id lookup all read
the same streams; each once had its own split on blank lines and its own
idea of a `data:` line (one only took `data: {` with its space, another
read an Anthropic-shaped `event:` then `data:` event as no data at all).
Here is the one reading, after the WHATWG rules as far as engines use them:

- An event ends at a blank line: `\\n\\n`, or `\\r\\n\\r\\n` from a server
  that writes CRLF. What arrives after the last blank line waits for more
  bytes (`Splitter`): the socket cuts events wherever it likes.
- Its `data:` lines, joined with `\\n`, are its payload; a line starting
  with `:` is a comment (a keep-alive) and carries none; other fields
  (`event:`, `id:`) are not read here.
- Whitespace around a payload is dropped. The payloads are JSON or
  `[DONE]`, where it never matters, and the relay had always stripped it.

Fast on purpose: the relay reads every engine's stream through this. An
event of one `data:` line (nearly all of them) is sliced, never split.
"""

from __future__ import annotations

DONE = b"[DONE]"  # the payload that ends an OpenAI-shaped stream


def last_boundary(data: bytes) -> int:
    """Index just past the last complete event in `data`, 0 when there is none."""
    lf = data.rfind(b"\n\n")
    crlf = data.rfind(b"\r\n\r\n")
    return max(lf + 2 if lf >= 0 else 0, crlf + 4 if crlf >= 0 else 0)


class Splitter:
    """Bytes off the socket in, complete events out; the part of an event not yet whole is held."""

    __slots__ = ("_tail",)

    def __init__(self) -> None:
        self._tail = b""

    def feed(self, chunk: bytes) -> bytes:
        """The complete events the bytes so far finish, as one block (b"" when none is complete yet)."""
        data = self._tail + chunk if self._tail else chunk
        cut = last_boundary(data)
        if not cut:
            self._tail = data
            return b""
        self._tail = data[cut:]
        return data[:cut]

    def rest(self) -> bytes:
        """At the stream's end: what was held, as a complete event (b"" when only blank lines were left).

        An engine that stops after its last event without the blank line
        still sent that event.
        """
        tail, self._tail = self._tail, b""
        return tail + b"\n\n" if tail.strip() else b""


def events(block: bytes) -> list[bytes]:
    """The events of a block of complete events, without their blank lines, line ends as `\\n`."""
    return [e for e in block.replace(b"\r\n", b"\n").split(b"\n\n") if e.strip()]


def data(event: bytes) -> bytes | None:
    """An event's payload: its `data:` lines joined with `\\n`; None when it has none (a comment)."""
    if event.startswith(b"data:") and b"\n" not in event:
        return event[5:].strip()
    lines = [line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


def payloads(block: bytes) -> list[bytes]:
    """The payload of each event in a block of complete events that has one, [DONE] included."""
    out = []
    for event in events(block):
        if event.startswith(b"data:") and b"\n" not in event:  # data()'s usual case, without the call
            out.append(event[5:].strip())
            continue
        found = data(event)
        if found is not None:
            out.append(found)
    return out
