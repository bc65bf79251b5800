"""Ending a server process a test started: SIGTERM, then SIGKILL if it does not exit in time."""

from __future__ import annotations

import subprocess
from typing import Any


def end(proc: subprocess.Popen[Any] | None, grace: float = 10.0) -> None:
    """Stop ``proc`` (if it still runs): SIGTERM, and SIGKILL after ``grace`` seconds."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(grace)
