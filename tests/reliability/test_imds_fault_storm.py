"""IMDS fault storms while events change: no crash, no false transition, memory bounded."""

from __future__ import annotations

import random
import time

import psutil

from tests.support.agent import AgentProcess, read_jsonl
from tests.support.faults import STORM
from tests.support.waiting import wait_for


def test_fault_storm_yields_exactly_the_true_transitions_and_bounded_memory(
        simulator, control, agents, tmp_path):
    out = tmp_path / "o.jsonl"
    agent = AgentProcess(
        ["--imds-url", simulator.url, "--state-dir", str(tmp_path / "s"), "--sink", f"file:{out}",
         "--poll-interval", "0.1"],
        env={"SE_FORWARDER_IMDS_MAX_BACKOFF": "0.5", "SE_FORWARDER_IMDS_TIMEOUT": "1"},
        log_path=tmp_path / "agent.log").start()
    agents.append(agent)
    rng = random.Random(7)
    expected: set[tuple[str, str]] = set()
    live: dict[str, str] = {}

    def settle():
        wait_for(lambda: {(e["subject"], e["type"].rsplit(".", 1)[1])
                          for e in read_jsonl(out)} == expected, timeout=30, what="catch-up")

    first = control.add(EventType="Reboot")["EventId"]
    live[first] = "Scheduled"
    expected.add((first, "scheduled"))
    settle()
    proc = psutil.Process(agent.proc.pid)
    rss_before = proc.memory_info().rss
    for _round in range(2):
        for fault in rng.sample(STORM, len(STORM)):
            control.faults(**fault)
            # A real change while the fault is pending; the agent must get through the fault
            # and report it. (A change undone while IMDS fails is invisible by nature: no
            # document ever showed it.)
            event_id = rng.choice(sorted(live)) if live else None
            if event_id and live[event_id] == "Scheduled" and rng.random() < 0.5:
                control.patch(event_id, EventStatus="Started")
                live[event_id] = "Started"
                expected.add((event_id, "started"))
            elif event_id and rng.random() < 0.4:
                control.delete(event_id)
                ran = live.pop(event_id) == "Started"
                expected.update({(event_id, "completed"), (event_id, "recovered")} if ran else
                                {(event_id, "canceled")})
            else:
                new = control.add(EventType=rng.choice(["Reboot", "Redeploy"]))["EventId"]
                live[new] = "Scheduled"
                expected.add((new, "scheduled"))
            settle()
    rss_after = proc.memory_info().rss
    time.sleep(1.0)
    events = read_jsonl(out)
    assert {(e["subject"], e["type"].rsplit(".", 1)[1]) for e in events} == expected
    assert len(events) == len({e["id"] for e in events})
    assert agent.alive()
    assert "Traceback" not in (tmp_path / "agent.log").read_text()
    growth = (rss_after - rss_before) / 1e6
    print(f"RSS before {rss_before / 1e6:.1f} MB, after {rss_after / 1e6:.1f} MB")
    assert growth < 15, f"RSS grew {growth:.1f} MB during the storm (a 10 MB body must not stay)"
