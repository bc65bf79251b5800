"""Fixtures for the simulator tests: in-process servers, the CLI as a subprocess, and a client
written to the pattern of Microsoft's documented sample (GET with ``Metadata: true``; on a new
DocumentIncarnation handle every event; POST ``StartRequests`` for the ones the policy approves).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests

from se_forwarder.simulator import SimulatorServer
from tests.support.cli import simulator_cli, simulator_env
from tests.support.paths import ROOT

API_VERSION = "2020-07-01"
HEADERS = {"Metadata": "true"}


def events_url(base: str, api_version: str = API_VERSION) -> str:
    return f"{base}/metadata/scheduledevents?api-version={api_version}"


def compute_url(base: str, api_version: str = "2021-02-01") -> str:
    return f"{base}/metadata/instance/compute?api-version={api_version}"


def imds_session() -> requests.Session:
    """A session that, like every IMDS client must, ignores proxy settings."""
    session = requests.Session()
    session.trust_env = False
    return session


# --- in-process servers ----------------------------------------------------------------------


@pytest.fixture
def start_sim() -> Iterator[Callable[..., SimulatorServer]]:
    """``start_sim(**kwargs)`` -> a started SimulatorServer on a free loopback port, stopped after."""
    servers: list[SimulatorServer] = []

    def start(**kwargs: Any) -> SimulatorServer:
        server = SimulatorServer("127.0.0.1", 0, **kwargs).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def sim(start_sim: Callable[..., SimulatorServer]) -> SimulatorServer:
    """One VM, real time, no throttling: the plain simulator."""
    return start_sim()


@pytest.fixture
def http() -> Iterator[requests.Session]:
    session = imds_session()
    yield session
    session.close()


# --- the CLI as a subprocess -----------------------------------------------------------------


@dataclass
class CliSimulator:
    """``python -m se_forwarder.simulator`` running in the background, and what it printed."""

    process: subprocess.Popen[str]
    url: str
    lines: list[str] = field(default_factory=list)

    # The command's own stop may take 12 s when its threads are slow to end (it joins the server's
    # thread and the clock's for up to 5 s each, its printer's for 2): a loaded machine is given more.
    def stop(self, sig: int = signal.SIGINT, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=timeout)


@pytest.fixture
def run_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run_cli(*args)``: the simulate command run to its end (--list-scenarios, bad input)."""
    return simulator_cli


@pytest.fixture
def cli_simulator() -> Iterator[Callable[..., CliSimulator]]:
    """``cli_simulator(*args)`` -> the simulate command on a free port, URL read from its output."""
    running: list[CliSimulator] = []

    def start(*args: str) -> CliSimulator:
        process = subprocess.Popen(
            [sys.executable, "-m", "se_forwarder.simulator", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=simulator_env(),
            cwd=ROOT,
        )
        first = process.stdout.readline() if process.stdout else ""
        if "listening on " not in first:
            process.kill()
            _, err = process.communicate(timeout=5)
            raise AssertionError(f"simulator did not start: {first!r} {err!r}")
        url = first.split("listening on ", 1)[1].split()[0]
        cli = CliSimulator(process, url, [first])
        threading.Thread(target=_drain, args=(process, cli.lines), daemon=True).start()
        running.append(cli)
        return cli

    yield start
    for cli in running:
        if cli.process.poll() is None:
            cli.process.kill()
            cli.process.wait(timeout=5)


def _drain(process: subprocess.Popen[str], lines: list[str]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line)


# --- the documented sample's client ----------------------------------------------------------

Policy = Callable[[dict[str, Any]], bool]


def sample_policy(event: dict[str, Any]) -> bool:
    """The official sample: approve EventSource User, and Freeze with 0 <= duration < 9."""
    if event.get("EventSource") == "User":
        return True
    duration = int(event.get("DurationInSeconds", -1))
    return event["EventType"] == "Freeze" and 0 <= duration < 9


def approve_all(event: dict[str, Any]) -> bool:
    """An operator who approves every event at once (e.g. moving off degraded hardware early)."""
    return True


@dataclass
class SampleClient:
    """Polls like the sample; remembers, per EventId, the statuses it saw (then "gone")."""

    base_url: str
    policy: Policy = sample_policy
    api_version: str = API_VERSION
    interval: float = 0.05
    session: requests.Session = field(default_factory=imds_session)
    last_incarnation: int | None = None
    seen: dict[str, list[str]] = field(default_factory=dict)
    events: dict[str, dict[str, Any]] = field(default_factory=dict)
    approved: list[str] = field(default_factory=list)
    first_seen_at: dict[str, float] = field(default_factory=dict)

    def get_scheduled_events(self) -> dict[str, Any]:
        reply = self.session.get(events_url(self.base_url, self.api_version), headers=HEADERS, timeout=5)
        reply.raise_for_status()
        return reply.json()

    def confirm_scheduled_event(self, event_id: str) -> None:
        body = {"StartRequests": [{"EventId": event_id}]}
        reply = self.session.post(
            events_url(self.base_url, self.api_version), json=body, headers=HEADERS, timeout=5
        )
        assert reply.status_code == 200, reply.text
        self.approved.append(event_id)

    def handle_scheduled_events(self, document: dict[str, Any]) -> None:
        current = {e["EventId"]: e for e in document["Events"]}
        for event_id in self.seen:
            if event_id not in current and self.seen[event_id][-1] != "gone":
                self.seen[event_id].append("gone")
        for event_id, event in current.items():
            statuses = self.seen.setdefault(event_id, [])
            self.events[event_id] = event
            self.first_seen_at.setdefault(event_id, time.time())
            if not statuses or statuses[-1] != event["EventStatus"]:
                statuses.append(event["EventStatus"])
            if event["EventStatus"] == "Scheduled" and event_id not in self.approved and self.policy(event):
                self.confirm_scheduled_event(event_id)

    def poll_once(self) -> None:
        document = self.get_scheduled_events()
        if document["DocumentIncarnation"] != self.last_incarnation:
            self.handle_scheduled_events(document)
            self.last_incarnation = document["DocumentIncarnation"]

    def run_until(self, done: Callable[[], bool], timeout: float) -> float:
        """Poll until ``done()``; returns the real seconds it took (AssertionError on timeout)."""
        started = time.monotonic()
        while True:
            self.poll_once()
            if done():
                self.poll_once()
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise AssertionError(f"not done after {timeout} s; saw {self.seen}")
            time.sleep(self.interval)

    def by_type(self, event_type: str) -> list[str]:
        return [i for i, e in self.events.items() if e["EventType"] == event_type]


def scenario_done(session: requests.Session, base_url: str) -> Callable[[], bool]:
    """A predicate asking the control API whether the playing scenario has ended."""
    return lambda: session.get(f"{base_url}/control/scenario", timeout=5).json()["done"]


@pytest.fixture
def sample_client() -> Iterator[Callable[..., SampleClient]]:
    """``sample_client(base_url, policy=sample_policy, ...)`` -> a SampleClient (closed after)."""
    clients: list[SampleClient] = []

    def make(base_url: str, **kwargs: Any) -> SampleClient:
        client = SampleClient(base_url, **kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.session.close()


@pytest.fixture
def policies() -> dict[str, Policy]:
    """The approval policies the scenario tests use, by name."""
    return {"sample": sample_policy, "approve-all": approve_all, "none": lambda event: False}
