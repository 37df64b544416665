"""Stopping a background task: cancel it and wait until it has finished.

The way it was written in several places,

    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass

cannot tell the task's cancellation from its caller's: a shutdown that
cancels the caller while it waits here had that cancellation swallowed,
and the caller carried on as though nobody had asked it to stop.
"""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> None:
    """Cancel every task given (None is passed over) and return once each has finished.

    A task's own ending (cancelled, or failing as it is cancelled) is taken
    here and not raised: the task is being stopped, and says its failures
    itself. The caller's own cancellation while it waits is raised, as
    always; the tasks are cancelled all the same."""
    pending = {task for task in tasks if task is not None}
    for task in pending:
        task.cancel()
    if not pending:
        return
    await asyncio.wait(pending)
    for task in pending:
        if not task.cancelled():
            task.exception()  # taken, so asyncio does not log it as never retrieved


async def event_within(event: asyncio.Event, seconds: float) -> bool:
    """Whether `event` is set within `seconds`: the wait of a background loop between its rounds.

    Not asyncio.wait_for(event.wait(), seconds): on Python 3.11 that
    swallows a cancel that comes in the same turn as the event is set, and
    a loop stopped by cancelling it (cancel_and_wait) runs on, its stop
    waiting for ever. An agent did exactly that when stopped as it connected
    (agent/link.py, 2026-12-08). asyncio.timeout passes the cancel on.
    """
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True
