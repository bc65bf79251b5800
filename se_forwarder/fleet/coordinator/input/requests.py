"""The API's requests on their way to the service's loop: each runs there, between two turns of folding.

The API (api/server.py, the page) never touches the fold from its own threads: it hands a function
to ``submit`` and waits for its future; the loop runs every waiting one at each turn (``serve``),
so a request sees the fold whole, and its result or its exception goes back through the future.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any


class Requests:
    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[Callable[[], Any], Future[Any]]] = queue.Queue()

    def submit(self, func: Callable[[], Any]) -> Future[Any]:
        """From any thread: ``func`` to run on the loop; its future."""
        future: Future[Any] = Future()
        self._queue.put((func, future))
        return future

    def serve(self) -> None:
        """On the loop: run every request waiting (a cancelled one is skipped)."""
        while True:
            try:
                func, future = self._queue.get_nowait()
            except queue.Empty:
                return
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(func())
            except Exception as exc:  # noqa: BLE001 - handed to the API, which answers with it
                future.set_exception(exc)
