"""Shared fixtures: the simulator over real HTTP, the agent as a real subprocess, and a real
Prometheus Alertmanager (Debian's) on loopback for the alert gates."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from se_forwarder.simulator import SimulatorServer
from tests.support.agent import AgentProcess, Control
from tests.support.alertmanager import INSTALL_HINT, Alertmanager, find_binary


@pytest.fixture
def simulator() -> Iterator[SimulatorServer]:
    with SimulatorServer() as sim:
        yield sim


@pytest.fixture
def control(simulator: SimulatorServer) -> Control:
    return Control(simulator.url)


@pytest.fixture
def agents() -> Iterator[list[AgentProcess]]:
    """Agents started by a test; any still running at the end are killed."""
    started: list[AgentProcess] = []
    yield started
    for agent in started:
        if agent.alive():
            agent.kill()


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[Alertmanager]:
    """A real Alertmanager on a free 127.0.0.1 port with a minimal config and its own storage
    directory, stopped at the end (skipped, saying how to install it, when it is missing)."""
    binary = find_binary()
    if binary is None:
        pytest.skip(f"Alertmanager is not installed ({INSTALL_HINT})")
    workdir = tmp_path / "alertmanager"
    workdir.mkdir()
    with Alertmanager(workdir, binary) as server:
        yield server


def pytest_configure(config: pytest.Config) -> None:
    """pytest-xdist hands out the modules (``--dist loadfile``) in the order below, not sorted by how
    many tests each has (its default), which would start the fleets, few tests each, last."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules that run a whole fleet (marked ``slow``, or under fleet_coordinator/) first, each
    module's tests kept together and in order: the test workers (one module each at a time) then
    start the longest ones early and fill the end of the run with short ones."""
    def long(item: pytest.Item) -> bool:
        return item.get_closest_marker("slow") is not None or "fleet_coordinator" in item.path.parts

    modules: dict[Path, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.path, []).append(item)
    ordered = sorted(modules.values(), key=lambda tests: not any(long(t) for t in tests))
    items[:] = [item for tests in ordered for item in tests]
