"""Shared fixtures: the simulator over real HTTP, and the agent as a real subprocess."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from se_forwarder.simulator import SimulatorServer
from tests.support.agent import AgentProcess, Control


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
