"""An agent killed while IMDS hangs and restarted is blinded for one read timeout at most, because
its state directory shows that IMDS answered it lately; without such a poll (a new VM, or one
that nobody asked for 24 h) it waits the long first-call time, as real IMDS may need it.

The agent is a real subprocess (SIGKILL, restart), the hang a simulator fault that every request
meets for some seconds, new connections too. What the agent did is read from the simulator's
request log (when each request started and how long it was held) and from the CloudEvents' times,
in order: no bound on wall-clock time is asserted."""

from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path

import pytest

from se_forwarder.imds import ENABLED_FOR
from se_forwarder.outbox import Outbox
from tests.support.agent import AgentProcess, cloudevents, log_records
from tests.support.config import write_config
from tests.support.waiting import wait_for

READ_TIMEOUT = 1.0  # imds.timeout
FIRST_CALL = 15.0  # imds.first_call_timeout: shorter than IMDS's 130 s, so the test is quick
HANG = 8.0  # seconds the hang lasts, from just before the kill
AFTER_HANG = 2.0  # the completion happens this long after the hang ends

pytestmark = pytest.mark.slow


def _moment(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def _polls(simulator, since: int) -> list[dict]:
    """Scheduled-events requests logged after the first ``since`` (the simulator logs a request
    when it ends), each with ``start`` and ``end`` as Unix times."""
    out = []
    for r in simulator.sim.requests()[since:]:
        if r["route"] == "scheduledevents":
            start = _moment(r["time"])
            out.append({**r, "start": start, "end": start + r["duration_ms"] / 1000})
    return sorted(out, key=lambda r: r["start"])


def _restart_during_a_hang(simulator, agents, tmp_path: Path, *, recent_poll: bool):
    """Agent A reports a Started event; IMDS hangs; A is killed while its poll is held; agent B
    starts on A's state directory (its last successful poll made older than 24 h unless
    ``recent_poll``); 2 s after the hang the event completes. (B's polls, the hang's end, the
    completion's moment, B's completed CloudEvent, B's log)."""
    out = tmp_path / "o.jsonl"
    config = write_config(tmp_path / "agent.toml", [{"type": "file", "path": str(out)}],
                          imds={"url": simulator.url, "poll_interval": 0.5, "timeout": READ_TIMEOUT,
                                "first_call_timeout": FIRST_CALL},
                          state={"dir": str(tmp_path / "state")})
    event_id = simulator.sim.add_event({"EventType": "Reboot", "EventStatus": "Started",
                                        "StartedSeconds": 3600})["EventId"]
    first = AgentProcess(["--config", str(config)], log_path=tmp_path / "a.log").start()
    agents.append(first)
    wait_for(lambda: cloudevents(out, "started"), what="agent A to report the Started event")
    hang = simulator.sim.add_fault({"hang": True, "seconds": HANG})
    wait_for(lambda: simulator.holding() == 1, what="agent A's poll held by the hang")
    first.kill()
    wait_for(lambda: simulator.holding() == 0, what="the simulator to see agent A gone")
    since = len(simulator.sim.requests())  # every request from here on is agent B's
    if not recent_poll:
        long_ago = time.time() - ENABLED_FOR - 3600
        with Outbox(tmp_path / "state") as box:
            box.set_meta({"last_poll_at": str(long_ago), "last_ok_poll_at": str(long_ago)})
        mark = tmp_path / "state" / "last-poll"  # the outbox's mark of a repeated poll outcome
        if mark.exists():
            os.utime(mark, (long_ago, long_ago))
    log_path = tmp_path / "b.log"
    second = AgentProcess(["--config", str(config)], log_path=log_path).start()
    agents.append(second)
    hang_end = hang["until"]
    assert wait_for(lambda: time.time() >= hang_end + AFTER_HANG, timeout=HANG + 10,
                    what="two seconds after the hang")
    simulator.sim.delete_event(event_id)
    completed_at = time.time()
    (completed,) = wait_for(lambda: cloudevents(out, "completed"), timeout=FIRST_CALL + 15,
                            what="agent B to report the completion")
    assert second.terminate() == 0
    return _polls(simulator, since), hang_end, completed_at, completed, log_records(log_path)


def test_an_agent_restarted_during_a_hang_is_blinded_for_one_read_timeout_only(
        simulator, agents, tmp_path):
    polls, hang_end, completed_at, completed, log = _restart_during_a_hang(
        simulator, agents, tmp_path, recent_poll=True)
    assert any("IMDS answered a poll" in r.get("message", "") for r in log)
    held = [p for p in polls if p["fault"] == "hang"]
    assert len(held) >= 2, "B gave up on its held request and asked again while the hang lasted"
    assert all(p["end"] < completed_at for p in held), "no request of B was still held then"
    assert any(hang_end <= p["start"] < completed_at and p["status"] == 200 for p in polls), \
        "B polled at its normal pace between the hang and the completion"
    observed = _moment(completed["time"])
    assert observed >= completed_at
    assert len([p for p in polls if completed_at <= p["start"] < observed]) <= 1, \
        "the first poll B started after the completion reported it"


def test_an_agent_without_a_poll_in_the_last_24_hours_waits_the_long_first_call(
        simulator, agents, tmp_path):
    polls, hang_end, completed_at, completed, log = _restart_during_a_hang(
        simulator, agents, tmp_path, recent_poll=False)
    assert any("the first answer may take up to" in r.get("message", "") for r in log)
    first, *later = polls
    assert first["fault"] == "hang"
    assert first["end"] > completed_at > hang_end, "B's first request stayed open through the hang"
    assert all(p["start"] >= first["end"] - 0.5 for p in later), "B asked nothing else meanwhile"
    assert _moment(completed["time"]) >= first["end"]
