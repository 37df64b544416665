"""A background loop waiting between rounds stops when cancelled, even as the thing it waits for happens."""

from __future__ import annotations

import asyncio

from llmgw.tasks import event_within


async def _loop_cancelled_as_its_event_is_set(wait) -> bool:
    event = asyncio.Event()

    async def loop() -> None:
        while True:
            await wait(event, 10)
            event.clear()

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)  # it waits now
    event.set()
    task.cancel()  # in the same turn: the stop of a control plane as a change arrives
    await asyncio.wait([task], timeout=2)
    stopped = task.done()
    task.cancel()
    await asyncio.wait([task], timeout=2)
    return stopped


async def test_a_loop_cancelled_as_its_event_is_set_stops():
    assert await _loop_cancelled_as_its_event_is_set(event_within)


async def test_event_within_says_whether_the_event_came():
    event = asyncio.Event()
    assert await event_within(event, 0.01) is False
    event.set()
    assert await event_within(event, 10) is True
