"""Waiting on what a test can observe, never on the clock.

A fixed sleep either waits too long on a quiet machine or too little on a
busy one (CI runs the suite on two cores beside other work), so a test
polls for the thing it is waiting for and fails with a sentence naming it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll `condition()` until it is truthy and return its value.

    Past `timeout` seconds fail with "… never happened", naming `what` (say
    "the usage row was written"), and the last value seen.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"waited {timeout:g} s for this, which never happened: {what} "
                                 f"(last seen: {value!r})")
        time.sleep(interval)


def wait_for(predicate: Callable[[], T], timeout: float, interval: float = 0.1) -> tuple[T, float]:
    """Poll until `predicate()` is truthy; returns (value, seconds it took), the falsy value if it never was.

    For a test that asserts on the value itself; wait_until fails with a sentence instead.
    """
    start = time.monotonic()
    while True:
        value = predicate()
        if value:
            return value, time.monotonic() - start
        if time.monotonic() - start > timeout:
            return value, time.monotonic() - start
        time.sleep(interval)
