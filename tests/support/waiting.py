"""Waiting for a condition, the one way every test does it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "condition", *,
             interval: float = 0.1) -> Any:
    """``predicate()``'s first truthy value, polled every ``interval`` seconds.

    An exception from ``predicate`` counts as "not yet" (a server still starting, a page element
    replaced while read); after ``timeout`` seconds an AssertionError names ``what`` and the last
    such exception.
    """
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            value = predicate()
        except Exception as exc:  # noqa: BLE001 - not ready yet: look again until the deadline
            last, value = exc, None
        if value:
            return value
        if time.monotonic() >= deadline:
            said = f" (last: {type(last).__name__}: {last})" if last else ""
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{said}")
        time.sleep(interval)
