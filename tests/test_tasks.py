"""Stopping a background task: cancel_and_wait returns once it has finished, and keeps the caller's own cancellation."""

from __future__ import annotations

import asyncio

import pytest

from llmgw.tasks import cancel_and_wait


async def test_it_returns_once_the_task_has_finished_its_cleanup():
    cleaned = []

    async def poller():
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0)  # cleanup that itself awaits, as flushing a writer does
            cleaned.append("flushed")

    task = asyncio.create_task(poller())
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert task.cancelled()
    assert cleaned == ["flushed"]


async def test_the_callers_own_cancellation_is_not_swallowed():
    may_finish = asyncio.Event()
    after_the_wait = []

    async def slow_to_stop():
        try:
            await asyncio.Event().wait()
        finally:
            await may_finish.wait()

    async def stopper(task):
        await cancel_and_wait(task)
        after_the_wait.append("carried on")  # must not happen: the stopper was cancelled

    task = asyncio.create_task(slow_to_stop())
    await asyncio.sleep(0)
    stopping = asyncio.create_task(stopper(task))
    await asyncio.sleep(0)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert after_the_wait == []
    may_finish.set()
    await asyncio.wait([task])
    assert task.cancelled()  # the task was cancelled all the same


async def test_a_task_that_fails_as_it_stops_does_not_fail_the_caller():
    async def fails_on_cancel():
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("could not flush") from None

    task = asyncio.create_task(fails_on_cancel())
    await asyncio.sleep(0)
    await cancel_and_wait(task, None)
    assert isinstance(task.exception(), RuntimeError)


async def test_no_task_at_all_is_nothing_to_wait_for():
    await cancel_and_wait(None)
    await cancel_and_wait()
