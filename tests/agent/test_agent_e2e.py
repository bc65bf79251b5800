"""The agent end to end: simulator over real HTTP -> agent subprocess -> file sink."""

from __future__ import annotations

import random
import time

import psutil

from tests.support.agent import AgentProcess, read_jsonl
from tests.support.waiting import wait_for


def run_args(simulator, tmp_path, *extra):
    return ["--imds-url", simulator.url, "--state-dir", str(tmp_path / "state"),
            "--sink", f"file:{tmp_path / 'out.jsonl'}", "--poll-interval", "0.1", *extra]


def observed(tmp_path):
    return [(e["subject"], e["type"].rsplit(".", 1)[1]) for e in read_jsonl(tmp_path / "out.jsonl")]


def test_each_transition_appears_exactly_once(simulator, control, agents, tmp_path):
    agent = AgentProcess(run_args(simulator, tmp_path), log_path=tmp_path / "agent.log").start()
    agents.append(agent)
    a = control.add(EventType="Reboot")["EventId"]
    wait_for(lambda: (a, "scheduled") in observed(tmp_path), what="scheduled")
    control.patch(a, EventStatus="Started")
    wait_for(lambda: (a, "started") in observed(tmp_path), what="started")
    control.delete(a)
    b = control.add(EventType="Redeploy")["EventId"]
    wait_for(lambda: (b, "scheduled") in observed(tmp_path), what="scheduled b")
    control.delete(b)
    c = control.add(EventType="Reboot", EventStatus="Started")["EventId"]
    wait_for(lambda: (c, "started") in observed(tmp_path), what="hardware failure")
    control.delete(c)
    expected = {(a, "scheduled"), (a, "started"), (a, "completed"), (a, "recovered"), (b, "scheduled"),
                (b, "canceled"), (c, "started"), (c, "completed"), (c, "recovered")}
    wait_for(lambda: set(observed(tmp_path)) == expected, what="all transitions")
    time.sleep(0.5)  # several more polls of an unchanged document
    assert sorted(observed(tmp_path)) == sorted(expected)
    assert agent.terminate() == 0


def test_sigterm_exits_zero_within_five_seconds(simulator, agents, tmp_path):
    agent = AgentProcess(run_args(simulator, tmp_path)).start()
    agents.append(agent)
    wait_for(lambda: (tmp_path / "state" / "outbox.sqlite3").exists(), what="agent start")
    time.sleep(0.5)
    began = time.monotonic()
    assert agent.terminate(timeout=5) == 0
    assert time.monotonic() - began < 5


def test_sigkill_at_random_moments_loses_and_duplicates_nothing(simulator, control, agents,
                                                                tmp_path):
    rng = random.Random(20261122)
    model: dict[str, str] = {}
    expected: set[tuple[str, str]] = set()

    def act(avoid: str | None = None) -> str | None:
        choices = [k for k in model if k != avoid]
        kind = rng.choice(["add", "add-started", "start", "delete", "delete"] if choices
                          else ["add", "add-started"])
        if kind == "add":
            event_id = control.add(EventType="Reboot")["EventId"]
            model[event_id] = "Scheduled"
            expected.add((event_id, "scheduled"))
            return event_id
        if kind == "add-started":
            event_id = control.add(EventType="Reboot", EventStatus="Started")["EventId"]
            model[event_id] = "Started"
            expected.add((event_id, "started"))
            return event_id
        event_id = rng.choice(choices)
        if kind == "start" and model[event_id] == "Scheduled":
            control.patch(event_id, EventStatus="Started")
            model[event_id] = "Started"
            expected.add((event_id, "started"))
        else:
            control.delete(event_id)
            ran = model.pop(event_id) == "Started"
            expected.update({(event_id, "completed"), (event_id, "recovered")} if ran else
                            {(event_id, "canceled")})
        return event_id

    agent = AgentProcess(run_args(simulator, tmp_path), log_path=tmp_path / "agent.log").start()
    agents.append(agent)
    for _round in range(14):
        touched = act()
        time.sleep(rng.uniform(0.0, 0.6))  # mid-poll, mid-commit or mid-delivery
        agent.kill()
        if rng.random() < 0.5:
            act(avoid=touched)  # changes while the agent is down, removals included
        agent = AgentProcess(run_args(simulator, tmp_path),
                             log_path=tmp_path / "agent.log").start()
        agents.append(agent)
        wait_for(lambda: set(observed(tmp_path)) == expected, timeout=20,
                 what=f"catch-up after kill {_round}")
    ids = [e["id"] for e in read_jsonl(tmp_path / "out.jsonl")]
    assert len(ids) == len(set(ids)), "a CloudEvent id was written twice"
    assert set(observed(tmp_path)) == expected
    assert agent.terminate() == 0


FAST_BACKOFF = {"SE_FORWARDER_IMDS_MAX_BACKOFF": "1"}


def test_garbage_500_and_429_are_logged_and_polling_goes_on(simulator, control, agents, tmp_path):
    log = tmp_path / "agent.log"
    agent = AgentProcess(run_args(simulator, tmp_path), env=FAST_BACKOFF, log_path=log).start()
    agents.append(agent)
    wait_for(lambda: (tmp_path / "state" / "outbox.sqlite3").exists(), what="agent start")
    time.sleep(0.5)
    control.faults(body="not json", count=3)
    control.faults(status=500, count=3)
    control.faults(status=429, count=3)
    event_id = control.add(EventType="Reboot")["EventId"]
    wait_for(lambda: observed(tmp_path) == [(event_id, "scheduled")], timeout=30,
             what="the event after the faults")
    text = log.read_text()
    assert "malformed" in text and "server" in text and "throttled" in text
    assert "Traceback" not in text
    assert agent.alive()


def test_memory_stays_flat_while_imds_answers_garbage(simulator, control, agents, tmp_path):
    args = run_args(simulator, tmp_path)
    args[args.index("--poll-interval") + 1] = "0.05"
    agent = AgentProcess(args, env=FAST_BACKOFF).start()
    agents.append(agent)
    wait_for(lambda: (tmp_path / "state" / "outbox.sqlite3").exists(), what="agent start")
    proc = psutil.Process(agent.proc.pid)
    control.faults(body="not json", count=40)  # warm up every code path first
    time.sleep(3)
    before = proc.memory_info().rss
    control.faults(body="not json", count=200)
    time.sleep(11)
    after = proc.memory_info().rss
    assert after - before < 3 * 1024 * 1024, f"RSS grew by {(after - before) / 1e6:.1f} MB"
    assert agent.alive()
    assert observed(tmp_path) == [], "garbage produced a transition"


def test_sigterm_while_the_first_imds_call_hangs_exits_zero_within_five_seconds(
        simulator, agents, tmp_path):
    simulator.sim.add_fault({"hang": True, "hang_seconds": 60, "route": "compute", "count": 5})
    agent = AgentProcess(run_args(simulator, tmp_path)).start()
    agents.append(agent)
    port = int(simulator.url.rsplit(":", 1)[1])
    wait_for(lambda: any(c.raddr and c.raddr.port == port
                         for c in psutil.Process(agent.proc.pid).net_connections()),
             what="the agent's first call (hanging)")
    time.sleep(0.3)
    began = time.monotonic()
    assert agent.terminate(timeout=6) == 0
    assert time.monotonic() - began < 5


def test_agent_sends_if_none_match_and_an_unchanged_document_costs_a_304(
        simulator, control, agents, tmp_path):
    event_id = control.add(EventType="Reboot")["EventId"]
    agent = AgentProcess(run_args(simulator, tmp_path)).start()
    agents.append(agent)
    wait_for(lambda: observed(tmp_path) == [(event_id, "scheduled")], what="first event")
    time.sleep(2.0)  # at most 4 IMDS requests a second, whatever the poll interval
    polls = [r for r in simulator.sim.requests() if r["route"] == "scheduledevents"]
    assert polls[0]["status"] == 200
    assert sum(r["status"] == 304 for r in polls) >= 5, [r["status"] for r in polls]
    control.delete(event_id)
    wait_for(lambda: (event_id, "canceled") in observed(tmp_path), what="the change after 304s")


def test_a_second_agent_on_the_same_state_dir_is_refused_in_one_line(
        simulator, control, agents, tmp_path):
    import subprocess
    import sys

    from tests.support.paths import ROOT

    event_id = control.add(EventType="Reboot")["EventId"]
    agent = AgentProcess(run_args(simulator, tmp_path)).start()
    agents.append(agent)
    wait_for(lambda: observed(tmp_path) == [(event_id, "scheduled")], what="the first agent")
    second = subprocess.run([sys.executable, "-m", "se_forwarder", "run", "--once",
                             *run_args(simulator, tmp_path)],
                            capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert second.returncode != 0
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and "another agent" in lines[0], second.stderr
    assert observed(tmp_path) == [(event_id, "scheduled")]
    assert agent.terminate() == 0
