"""The agent following an engine's KV events: what it sends the leader, and what it does when events go missing.

The publisher is sim-engine's, which writes vLLM's frames (tests/engines/test_kvevents.py holds them to a batch
vLLM wrote), connecting to the port the agent binds as vLLM does.
"""

from __future__ import annotations

import asyncio
import json

from llmgw.agent.kvfeed import KvFeed
from llmgw.engines.base import loopback_port
from llmgw.engines.kvevents import Removed, Stored, chain
from llmgw.sim.prefixcache import Publisher


async def first_messages(feed: KvFeed, publisher: Publisher, events: list) -> list:
    """Publish until the subscription has reached the publisher and the feed has something to send."""
    for _ in range(100):
        publisher.publish(events)
        try:
            return await asyncio.wait_for(feed.take(), timeout=0.2)
        except TimeoutError:
            continue
    raise AssertionError("the feed heard nothing in 20 s")


async def test_stored_blocks_reach_the_leader_as_llmgws_own_hashes_and_a_gap_clears_them():
    endpoint = f"tcp://127.0.0.1:{loopback_port()}"
    feed = KvFeed()
    feed.resend()  # a leader that takes them
    feed.follow("r_1", endpoint)
    publisher = Publisher(json.dumps({"endpoint": endpoint, "topic": "kv"}))
    try:
        root = Stored((b"a", b"b"), None, tuple(range(8)), 4)
        (message,) = await first_messages(feed, publisher, [root])
        assert message.shard_id == "r_1" and message.block_size == 4
        assert message.added == chain(list(range(8)), 4) and not message.cleared

        publisher.publish([Stored((b"c",), b"b", (9, 9, 9, 9), 4), Removed((b"a",))])
        (message,) = await asyncio.wait_for(feed.take(), timeout=5)
        assert message.added == chain([9, 9, 9, 9], 4, parent=chain(list(range(8)), 4)[-1])
        assert message.removed == chain(list(range(8)), 4)[:1]

        publisher._seq += 1  # a batch the publisher dropped
        publisher.publish([Stored((b"d",), None, (5, 5, 5, 5), 4)])
        (message,) = await asyncio.wait_for(feed.take(), timeout=5)
        assert message.cleared and message.added == chain([5, 5, 5, 5], 4)

        feed.stop("r_1")
        (message,) = await asyncio.wait_for(feed.take(), timeout=5)
        assert message.cleared and not message.added and feed.following() == []
    finally:
        publisher.close()
        await feed.close()


async def test_without_a_leader_taking_them_nothing_piles_up_and_the_next_leader_gets_the_whole():
    endpoint = f"tcp://127.0.0.1:{loopback_port()}"
    feed = KvFeed()
    feed.resend()
    feed.follow("r_1", endpoint)
    publisher = Publisher(json.dumps({"endpoint": endpoint, "topic": "kv"}))
    try:
        await first_messages(feed, publisher, [Stored((b"a",), None, (1, 2, 3, 4), 4)])
        feed.pause()  # the leader went away
        publisher.publish([Stored((b"b",), b"a", (5, 6, 7, 8), 4)])
        await asyncio.sleep(0.3)
        assert feed._pending == {}
        feed.resend()
        (message,) = await asyncio.wait_for(feed.take(), timeout=5)
        assert message.cleared and message.added == chain([1, 2, 3, 4, 5, 6, 7, 8], 4)
    finally:
        publisher.close()
        await feed.close()


def test_a_new_leader_is_sent_a_replicas_million_blocks_in_parts_each_inside_the_links_limit():
    from llmgw.agent.kvfeed import MESSAGE_HASHES, _messages
    from llmgw.engines.kvevents import Change
    from llmgw.protocol import MAX_MESSAGE_BYTES, encode

    blocks = list(range(-(1 << 62), -(1 << 62) + 1_000_000))
    messages = _messages("r_1", Change(block_size=16, added=blocks, cleared=True))
    assert len(messages) == 1_000_000 // MESSAGE_HASHES
    assert messages[0].cleared and not any(m.cleared for m in messages[1:])
    assert [h for m in messages for h in m.added] == blocks
    assert max(len(encode(m)) for m in messages) < MAX_MESSAGE_BYTES
    # A small change stays one message, as it came.
    (only,) = _messages("r_1", Change(block_size=16, added=[1], removed=[2]))
    assert (only.added, only.removed, only.cleared) == ([1], [2], False)
