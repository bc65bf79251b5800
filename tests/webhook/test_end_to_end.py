"""End to end: simulator over HTTP -> the agent as a real subprocess -> a webhook receiver.

The receiver is down (its port closed) while 200 transitions happen (and 40 ``recovered`` after the
40 completed); once it is back every one arrives, in outbox order, signed and parsable. The same
holds when the agent is SIGKILLed during the outage and restarted. A 410 parks the sink, `status`
says so, and `sink resume` delivers the kept backlog.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from se_forwarder.outbox import db_path
from se_forwarder.status import read_status
from tests.support.agent import AgentProcess
from tests.support.cli import cli
from tests.support.receiver import Receiver, Reply
from tests.support.waiting import wait_for

EVENTS = 80  # 80 scheduled + 40 started + 40 completed + 40 canceled = 200 transitions
ALL = 240  # and a recovered after each completed (no [health], no hook: at once)


def stored_ids(state_dir: Path) -> list[str]:
    """CloudEvent ids in the outbox, in outbox order (read without disturbing the agent)."""
    if not db_path(state_dir).exists():
        return []
    db = sqlite3.connect(f"file:{db_path(state_dir)}?mode=ro", uri=True, timeout=5)
    try:
        return [row[0] for row in db.execute("SELECT ce_id FROM events ORDER BY seq")]
    except sqlite3.OperationalError:
        return []  # the agent is still creating the schema
    finally:
        db.close()


def first_seen(ids: list[str]) -> list[str]:
    seen: set[str] = set()
    return [i for i in ids if not (i in seen or seen.add(i))]


def closed_receiver(**kwargs) -> Receiver:
    """A receiver whose port is known but closed: the webhook endpoint is down."""
    receiver = Receiver(**kwargs).start()
    receiver.stop()
    return receiver


def agent_args(simulator, state_dir: Path, *extra: str) -> list[str]:
    return ["--imds-url", simulator.url, "--state-dir", str(state_dir), "--poll-interval", "0.1",
            "--dry-run", *extra]


def add_events(sim, count: int) -> list[str]:
    # Reboot from the platform: no rule of the default policy approves it, so no extra transitions
    return [sim.add_event({"EventType": "Reboot", "EventSource": "Platform"})["EventId"]
            for _ in range(count)]


def test_a_receiver_down_during_200_transitions_gets_all_of_them_in_order_when_back(
    simulator, agents, tmp_path, secret, tls
):
    state_dir = tmp_path / "state"
    receiver = closed_receiver(tls=tls, secrets=[secret])
    config = tmp_path / "agent.toml"
    config.write_text(
        f'[[sinks]]\ntype = "webhook"\nname = "alerts"\nurl = "{receiver.url}"\n'
        f'ca_file = "{tls.ca_cert}"\nsecret_env = "ALERTS_HOOK_SECRET"\n'
    )
    log = tmp_path / "agent.log"
    agent = AgentProcess(agent_args(simulator, state_dir, "--config", str(config)),
                         env={"ALERTS_HOOK_SECRET": secret}, log_path=log).start()
    agents.append(agent)

    ids = add_events(simulator.sim, EVENTS)
    wait_for(lambda: len(stored_ids(state_dir)) == EVENTS, timeout=20, what="80 scheduled")
    for event_id in ids[: EVENTS // 2]:
        simulator.sim.patch_event(event_id, {"EventStatus": "Started"})
    wait_for(lambda: len(stored_ids(state_dir)) == EVENTS * 3 // 2, timeout=20, what="40 started")
    for event_id in ids:
        simulator.sim.delete_event(event_id)
    wait_for(lambda: len(stored_ids(state_dir)) == ALL, timeout=20, what="200 transitions, 40 recovered")
    assert receiver.requests == []

    receiver.start()
    try:
        delivered = receiver.wait_for(ALL, timeout=45)
        assert delivered == stored_ids(state_dir)  # all, in outbox order, none twice
        assert receiver.errors == []  # every delivery parsed and its signature verified
        assert {r.mode for r in receiver.accepted()} == {"structured"}
        assert "cannot connect to https://127.0.0.1:" in log.read_text()
        assert "Traceback" not in log.read_text()
        assert agent.terminate() == 0
    finally:
        receiver.stop()


def test_a_sigkill_of_the_agent_during_the_outage_loses_nothing(simulator, agents, tmp_path):
    state_dir = tmp_path / "state"
    receiver = closed_receiver()
    args = agent_args(simulator, state_dir, "--sink", f"webhook:{receiver.url}")
    log = tmp_path / "agent.log"
    agent = AgentProcess(args, log_path=log).start()
    agents.append(agent)

    ids = add_events(simulator.sim, EVENTS)
    wait_for(lambda: len(stored_ids(state_dir)) == EVENTS, timeout=20, what="80 scheduled")
    agent.kill()
    for event_id in ids[: EVENTS // 2]:  # while the agent is dead: 40 start...
        simulator.sim.patch_event(event_id, {"EventStatus": "Started"})
    for event_id in ids[EVENTS // 2:]:  # ...and 40 are canceled
        simulator.sim.delete_event(event_id)
    agent = AgentProcess(args, log_path=log).start()
    agents.append(agent)
    wait_for(lambda: len(stored_ids(state_dir)) == 160, timeout=20, what="the changes made meanwhile")
    for event_id in ids[: EVENTS // 2]:
        simulator.sim.delete_event(event_id)
    wait_for(lambda: len(stored_ids(state_dir)) == ALL, timeout=20, what="200 transitions, 40 recovered")
    sink = wait_for(lambda: next((s for s in read_status(state_dir)["sinks"]
                                  if s["last_error"] and s["backlog"] == ALL), None),
                    timeout=20, what="status showing the backlog and the error")
    assert sink["last_error"].startswith(f"cannot connect to {receiver.url}")

    receiver.start()
    try:
        delivered = receiver.wait_for(ALL, timeout=45)
        assert first_seen(delivered) == stored_ids(state_dir)
        assert len(delivered) == ALL  # nothing was accepted before the kill, so nothing repeats
        assert receiver.errors == []
        assert "Traceback" not in log.read_text()
        assert agent.terminate() == 0
    finally:
        receiver.stop()


def test_a_410_parks_the_sink_status_says_so_and_sink_resume_delivers_the_kept_backlog(
    simulator, agents, tmp_path
):
    state_dir = tmp_path / "state"
    with Receiver() as receiver:
        receiver.script(Reply(410, body=b"this hook was deleted"))
        name = f"webhook:{receiver.url}"
        agent = AgentProcess(agent_args(simulator, state_dir, "--sink", name),
                             log_path=tmp_path / "agent.log").start()
        agents.append(agent)
        add_events(simulator.sim, 3)

        def parked_sink() -> dict | None:
            if not db_path(state_dir).exists():
                return None
            [sink] = json.loads(cli("status", "--state-dir", str(state_dir), "--json").stdout)["sinks"]
            return sink if sink["parked"] and sink["backlog"] == 3 else None

        sink = wait_for(parked_sink, timeout=20, what="the sink parked with its backlog")
        assert sink["parked"].startswith(f"HTTP 410 Gone from {receiver.url}")
        assert "SINK PARKED" in (tmp_path / "agent.log").read_text()
        time.sleep(1.0)
        assert len(receiver.posts()) == 1  # parked: nothing more is tried

        assert cli("sink", "resume", name, "--state-dir", str(state_dir)).returncode == 0
        assert receiver.wait_for(3, timeout=15) == stored_ids(state_dir)
        assert agent.terminate() == 0


def test_a_restart_of_the_agent_retries_a_parked_sink(simulator, agents, tmp_path):
    state_dir = tmp_path / "state"
    with Receiver() as receiver:
        receiver.script(Reply(410, body=b"this hook was deleted"))
        name = f"webhook:{receiver.url}"
        args = agent_args(simulator, state_dir, "--sink", name)
        agent = AgentProcess(args, log_path=tmp_path / "agent.log").start()
        agents.append(agent)
        add_events(simulator.sim, 2)
        wait_for(lambda: db_path(state_dir).exists() and json.loads(
            cli("status", "--state-dir", str(state_dir), "--json").stdout)["sinks"][0]["parked"],
            timeout=20, what="the sink to park")
        assert agent.terminate() == 0
        restarted = AgentProcess(args, log_path=tmp_path / "agent.log").start()
        agents.append(restarted)
        assert receiver.wait_for(2, timeout=15) == stored_ids(state_dir)
        assert "retrying its backlog after the restart" in (tmp_path / "agent.log").read_text()
        assert restarted.terminate() == 0
