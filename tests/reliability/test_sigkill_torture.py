"""20 SIGKILLs at random moments during a 200-transition scenario, with webhook and file sinks.

Zero transitions missing; a repeat at the webhook only ever carries the same CloudEvent id; the file
sink (which checks its own tail on restart) has no repeat at all; each sink keeps outbox order.
"""

from __future__ import annotations

import random
import threading
import time

from tests.support.agent import AgentProcess, crash_repeatedly, read_jsonl
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for

EVENTS = 100  # each yields scheduled + canceled: 200 transitions
LIFETIME = 5.0  # seconds an event stays listed; longer than any gap between two agent polls
KILLS = 20


def first_arrivals(ids: list[str]) -> list[str]:
    seen: set[str] = set()
    return [i for i in ids if not (i in seen or seen.add(i))]


def test_twenty_sigkills_lose_nothing_and_repeat_only_same_ids(simulator, agents, tmp_path):
    rng = random.Random(42)
    out = tmp_path / "o.jsonl"
    with Receiver() as receiver:
        config = tmp_path / "c.toml"
        config.write_text(f'[[sinks]]\ntype = "file"\npath = "{out}"\n'
                          f'[[sinks]]\ntype = "webhook"\nurl = "{receiver.url}"\n')
        args = ["--config", str(config), "--imds-url", simulator.url,
                "--state-dir", str(tmp_path / "s"), "--poll-interval", "0.1"]
        added: list[str] = []

        def scenario() -> None:
            pending: list[tuple[float, str]] = []
            for _ in range(EVENTS):
                added.append(simulator.sim.add_event({"EventType": "Reboot"})["EventId"])
                pending.append((time.monotonic() + LIFETIME, added[-1]))
                while pending and pending[0][0] <= time.monotonic():
                    simulator.sim.delete_event(pending.pop(0)[1])
                time.sleep(0.06)
            for due, event_id in pending:
                time.sleep(max(0.0, due - time.monotonic()))
                simulator.sim.delete_event(event_id)

        def start() -> AgentProcess:
            agents.append(AgentProcess(args, log_path=tmp_path / "agent.log").start())
            return agents[-1]

        driver = threading.Thread(target=scenario, daemon=True)
        driver.start()
        crash_repeatedly(start, simulator, KILLS, rng, up_to=0.5)
        driver.join(60)
        polls = len(simulator.sim.requests())
        final = AgentProcess(args, log_path=tmp_path / "agent.log").start()
        agents.append(final)
        wait_for(lambda: len(simulator.sim.requests()) > polls + 1, timeout=20,
                 what="the last agent to poll")
        expected = {f"{e}/{s}" for e in added for s in ("scheduled", "canceled")}
        assert len(expected) == 2 * EVENTS
        wait_for(lambda: {e["id"] for e in read_jsonl(out)} == expected, timeout=60,
                 what="every transition in the file")
        wait_for(lambda: set(receiver.accepted_ids()) == expected, timeout=60,
                 what="every transition at the webhook")
        assert final.terminate() == 0
        webhook_ids = receiver.accepted_ids()
    file_ids = [e["id"] for e in read_jsonl(out)]
    assert len(file_ids) == len(set(file_ids)), "the file sink wrote an event twice"
    assert first_arrivals(webhook_ids) == file_ids, "both sinks keep the outbox order"
    print(f"webhook: {len(webhook_ids)} deliveries for {len(expected)} events "
          f"({len(webhook_ids) - len(expected)} repeats, same ids)")
