"""The messages between the main process and its workers read back as they were written, every one of them."""

from __future__ import annotations

import asyncio
import socket

import pytest

from llmgw.control.workers.channel import Channel
from llmgw.control.workers.messages import (
    MESSAGES,
    Borrow,
    Counts,
    Failed,
    Hello,
    KeysChanged,
    LeaseNow,
    Lent,
    Orphans,
    PartChanged,
    Ready,
    RoutesNow,
    Serve,
    Serving,
    Shared,
    Trip,
    decode,
    encode,
)
from llmgw.protocol import CachedBlocks
from llmgw.protocol.codec import ProtocolError
from llmgw.store.records import Lease

ROUTES = RoutesNow(
    {"placed": {"qwen": {"context_length": 8192, "max_output_tokens": 0, "capabilities": ["tools"],
                         "replicas": [["r1", "http://127.0.0.1:9001"]], "upstream": "", "on_demand": False,
                         "stopped": False}},
     "waits": {"llama": "no node has room"}, "loading": {}},
    key="engine-key",
)
LEASE = LeaseNow(leading=True, answers=False, lease=Lease("leader", "cp-a", "127.0.0.1:7443", 1764780000.5, 3))

EVERY_MESSAGE = [
    Hello(index=1, workers=2, listen_fds=[5, 6], config={"listen": "127.0.0.1:8080", "workers": 2},
          lease=LEASE, routes=ROUTES, rate=[["key", "k_1", 1764780000, 3]]),
    Serve(),
    LEASE,
    LeaseNow(leading=False),
    ROUTES,
    Shared(rate=[["key", "k_1", 1764780000, 2]], spend=[["project", "p_1", "month", 1764547200, 1200]]),
    Lent([["key", "k_1", 12, 0], ["project", "p_1", 0, 41]]),
    Orphans([0]),
    KeysChanged(invalidate="key_abc"),
    KeysChanged(clear=True),
    PartChanged("mcp"),
    Ready(pid=4242),
    Serving(pid=4242),
    Failed("the store at sqlite:///x.db could not be opened: no such directory"),
    Counts(rate=[["key", "k_1", 1764780000, 1]], spend=[], returned=[["key", "k_1", 4]]),
    Counts(metrics=[["llmgw_requests", "counter", "Requests", [["llmgw_requests_total", {"model": "qwen"}, 3.0]]]],
           asked={"qwen": 1764780000.25}, last_used={"qwen": 1764780001.0}),
    Counts(),
    Borrow([["key", "k_1", 60]]),
    Trip(endpoint="qwen/r1", reason="connection refused"),
    CachedBlocks("r_1", 16, added=[-4611686018427387904, 7], removed=[3], cleared=True),
]


@pytest.mark.parametrize("message", EVERY_MESSAGE, ids=lambda m: type(m).__name__)
def test_each_message_reads_back_as_it_was_written(message):
    line = encode(message)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode(line) == message


def test_every_kind_of_message_is_among_those_checked():
    assert {type(m) for m in EVERY_MESSAGE} == set(MESSAGES.values())


def test_a_field_of_the_wrong_type_is_refused_naming_it():
    with pytest.raises(ProtocolError, match=r"orphans\.sockets\[0\]: expected a whole number"):
        decode(b'{"type": "orphans", "body": {"sockets": ["0"]}}')


def test_a_message_of_an_unknown_kind_is_refused_naming_the_known_ones():
    with pytest.raises(ProtocolError, match="unknown message type 'gossip'; known: blocks, borrow, counts"):
        decode(b'{"type": "gossip", "body": {}}')


def test_something_that_is_not_a_message_cannot_be_sent():
    with pytest.raises(TypeError, match="dict is not a message between the main process and a worker"):
        encode({"t": "serve"})  # type: ignore[arg-type]


async def test_a_line_that_does_not_read_is_passed_over_and_the_next_message_arrives():
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    main, worker = await Channel.open(left), await Channel.open(right)
    try:
        main.writer.write(b'{"type": "orphans", "body": {"sockets": "all"}}\n')
        main.send(Serving(pid=7))
        assert await asyncio.wait_for(worker.receive(), 5) == Serving(pid=7)
        await main.close()
        assert await asyncio.wait_for(worker.receive(), 5) is None  # the other end closed
    finally:
        await worker.close()
