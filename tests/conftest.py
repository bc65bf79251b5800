"""Shared fixtures: the simulator over real HTTP, and the agent as a real subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from se_forwarder.simulator import SimulatorServer

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def simulator() -> Iterator[SimulatorServer]:
    with SimulatorServer() as sim:
        yield sim


class Control:
    """The simulator's control API, over HTTP like any user would call it."""

    def __init__(self, base_url: str) -> None:
        self.base = base_url.rstrip("/")
        self.http = requests.Session()
        self.http.trust_env = False

    def add(self, **fields: object) -> dict:
        r = self.http.post(f"{self.base}/control/events", json=fields, timeout=5)
        assert r.status_code == 201, r.text
        return r.json()

    def patch(self, event_id: str, **fields: object) -> dict:
        r = self.http.patch(f"{self.base}/control/events/{event_id}", json=fields, timeout=5)
        assert r.status_code == 200, r.text
        return r.json()

    def delete(self, event_id: str) -> None:
        r = self.http.delete(f"{self.base}/control/events/{event_id}", timeout=5)
        assert r.status_code in (200, 204), r.text

    def faults(self, **spec: object) -> None:
        r = self.http.post(f"{self.base}/control/faults", json=spec, timeout=5)
        assert r.status_code in (200, 201, 204), r.text

    def approvals(self) -> list[dict]:
        return self.http.get(f"{self.base}/control/approvals", timeout=5).json()

    def document(self) -> dict:
        r = self.http.get(f"{self.base}/metadata/scheduledevents",
                          params={"api-version": "2020-07-01"}, headers={"Metadata": "true"},
                          timeout=5)
        return r.json()


@pytest.fixture
def control(simulator: SimulatorServer) -> Control:
    return Control(simulator.url)


class AgentProcess:
    """`se-forwarder run` as a real subprocess (so SIGKILL is a real crash)."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None,
                 log_path: Path | None = None) -> None:
        self.args = args
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = None

    def start(self) -> AgentProcess:
        if self.log_path is not None:
            self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in wait/kill
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "se_forwarder", "run", *self.args],
            env=self.env, cwd=ROOT,
            stdout=self._log or subprocess.DEVNULL, stderr=self._log or subprocess.DEVNULL,
        )
        return self

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._close_log()

    def terminate(self, timeout: float = 10) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._close_log()
        return code

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


@pytest.fixture
def agents() -> Iterator[list[AgentProcess]]:
    """Agents started by a test; any still running at the end are killed."""
    started: list[AgentProcess] = []
    yield started
    for agent in started:
        if agent.alive():
            agent.kill()


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def toml_value(value: object) -> str:
    """A Python value as TOML (strings, numbers, booleans, lists, inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(type(value))
