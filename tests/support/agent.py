"""The agent and the simulator as a user drives them: ``se-forwarder run`` as a real subprocess,
the simulator's control API over HTTP, and what the agent wrote (file-sink lines, JSON logs)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from .paths import ROOT
from .waiting import wait_for


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

    def clear_faults(self) -> None:
        r = self.http.delete(f"{self.base}/control/faults", timeout=5)
        assert r.status_code in (200, 204), r.text

    def approvals(self) -> list[dict]:
        return self.http.get(f"{self.base}/control/approvals", timeout=5).json()

    def document(self) -> dict:
        r = self.http.get(f"{self.base}/metadata/scheduledevents",
                          params={"api-version": "2020-07-01"}, headers={"Metadata": "true"},
                          timeout=5)
        return r.json()


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


def crash_repeatedly(start: Callable[[], AgentProcess], simulator: Any, kills: int, rng: random.Random,
                     up_to: float) -> None:
    """``kills`` times: start an agent, let it poll the simulator, SIGKILL it within ``up_to`` s."""
    for _ in range(kills):
        polls = len(simulator.sim.requests())
        agent = start()
        wait_for(lambda p=polls: len(simulator.sim.requests()) > p + 1, timeout=20,
                 what="the restarted agent to poll")
        time.sleep(rng.uniform(0.0, up_to))
        agent.kill()


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


def cloudevents(sink_path: Path, kind: str | None = None) -> list[dict]:
    """CloudEvents written by the file sink (of type ``com.azure.scheduledevents.<kind>``)."""
    events = read_jsonl(sink_path)
    if kind is None:
        return events
    return [e for e in events if e["type"] == f"com.azure.scheduledevents.{kind}"]


def log_records(log_path: Path) -> list[dict]:
    """The agent's JSON log lines (other lines, e.g. from a crash, are skipped)."""
    out = []
    if not log_path.exists():
        return out
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
