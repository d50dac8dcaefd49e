"""Polling helper shared by the prefetch-thread tests."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(cond: Callable[[], bool], timeout: float = 5.0, step: float = 0.005) -> bool:
    """Whether ``cond()`` becomes true within ``timeout`` seconds (polled every ``step``)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()
