"""PagerDuty and Opsgenie sinks of a real agent (a subprocess, against the simulator over HTTP)
through 8 SIGKILLs at random moments and an outage of both services during a scenario of 20
overlapping events, half of them run (Scheduled, Started, completed), half canceled.

The services are local stand-ins (tests/support/pager_receiver.py) that check every request against
PagerDuty's Events API v2 and Opsgenie's Alert API schemas and keep alerts as the services do: a
trigger (create) for an open key is folded into that alert; one for a closed key opens a new alert.
At the end, from each service's view, for every event the agent saw (its file sink says which):
exactly one alert opened (no key triggered again after its resolve, so none was triggered twice for
one state as a consumer sees it), resolved, a trigger for each state it was seen in, and every
request valid. A repeat after a SIGKILL (the request in flight when the agent died) is folded into
its open alert, or dropped for a resolve, as the services do.
"""

from __future__ import annotations

import random
import threading
import time

from tests.support.agent import AgentProcess, crash_repeatedly, log_records, read_jsonl
from tests.support.pager_receiver import OpsgenieReceiver, PagerDutyReceiver
from tests.support.waiting import wait_for

ROUTING_KEY = "R0ut1ngKey0f32LettersAndD1g1ts00"
API_KEY = "3f1c9b0e-1a2b-4c3d-8e9f-0a1b2c3d4e5f"
EVENTS = 20  # one every 0.6 s, overlapping
PHASE = 3.0  # seconds an event stays Scheduled, and Started: longer than an agent's restart
KILLS = 8


def test_pager_alerts_survive_sigkills_and_an_outage_each_opened_once_and_resolved(simulator, agents,
                                                                                    tmp_path) -> None:
    rng = random.Random(7)
    log = tmp_path / "all.jsonl"
    with PagerDutyReceiver(ROUTING_KEY) as pagerduty, OpsgenieReceiver(API_KEY) as opsgenie:
        config = tmp_path / "agent.toml"
        config.write_text(
            f'[[sinks]]\ntype = "file"\npath = "{log}"\n'
            f'[[sinks]]\ntype = "pagerduty"\nurl = "{pagerduty.url}"\nrouting_key_env = "PD_KEY"\n'
            f'[[sinks]]\ntype = "opsgenie"\nurl = "{opsgenie.base_url}"\n'
            f'api_key_file = "{tmp_path / "og.key"}"\n')
        (tmp_path / "og.key").write_text(API_KEY + "\n")
        args = ["--config", str(config), "--imds-url", simulator.url, "--state-dir", str(tmp_path / "s"),
                "--poll-interval", "0.1"]
        env = {"PD_KEY": ROUTING_KEY}
        added: list[str] = []

        def scenario() -> None:
            due: list[tuple[float, str, str]] = []  # (when, EventId, what next)
            for i in range(EVENTS):
                fields = {"EventType": "Reboot", "NotBeforeInSeconds": 3600}
                added.append(simulator.sim.add_event(fields)["EventId"])
                due.append((time.monotonic() + PHASE, added[-1], "start" if i % 2 == 0 else "cancel"))
                if i == EVENTS // 3:  # both services go down for a while, and come back
                    pagerduty.stop()
                    opsgenie.stop()
                if i == EVENTS // 3 + 6:
                    pagerduty.start()
                    opsgenie.start()
                time.sleep(0.6)
                due = step(due)
            while due:
                time.sleep(0.1)
                due = step(due)

        def step(due: list[tuple[float, str, str]]) -> list[tuple[float, str, str]]:
            later = []
            for when, event_id, what in due:
                if when > time.monotonic():
                    later.append((when, event_id, what))
                elif what == "start":
                    simulator.sim.patch_event(event_id, {"EventStatus": "Started", "NotBefore": ""})
                    later.append((time.monotonic() + PHASE, event_id, "complete"))
                else:
                    simulator.sim.delete_event(event_id)
            return later

        def start() -> AgentProcess:
            agents.append(AgentProcess(args, env=env, log_path=tmp_path / "agent.log").start())
            return agents[-1]

        driver = threading.Thread(target=scenario, daemon=True)
        driver.start()
        crash_repeatedly(start, simulator, KILLS, rng, up_to=2.0)
        driver.join(120)
        assert not driver.is_alive()
        final = start()

        def reported() -> dict[str, set[str]]:
            """EventId -> the states the agent recorded (the file sink: what it saw, in its outbox)."""
            out: dict[str, set[str]] = {}
            for e in read_jsonl(log):
                out.setdefault(e["subject"], set()).add(e["type"].rsplit(".", 1)[-1])
            return out

        wait_for(lambda: all(r & {"completed", "canceled"} for r in reported().values()), timeout=60,
                 what="an end of every event the agent saw, in its file sink")
        expected = set(reported())
        for service in (pagerduty, opsgenie):
            wait_for(lambda s=service: set(s.alerts.closed) == expected and not s.alerts.open, timeout=90,
                     what="every alert resolved")
        assert final.terminate() == 0

    seen = reported()
    assert len(seen) >= EVENTS // 2, "the agent was down so much that it saw few events"
    run = {k for k, states in seen.items() if "started" in states}
    refused = {r["sink"].split(":")[0] for r in log_records(tmp_path / "agent.log")
               if "cannot connect" in r.get("message", "")}
    assert refused == {"pagerduty", "opsgenie"}  # the outage hit both, and they caught up
    for service in (pagerduty, opsgenie):
        assert service.errors == [], service.errors  # every request followed the documented schema
        alerts = service.alerts
        assert dict(alerts.opened) == dict.fromkeys(expected, 1)  # no key opened a second alert
        assert dict(alerts.closed) == dict.fromkeys(expected, 1)  # every trigger has its resolve
        triggered = alerts.triggers_per_state()
        scheduled = {k for k, states in seen.items() if "scheduled" in states}
        assert {k for k, s in triggered if s == "scheduled"} == scheduled
        assert {k for k, s in triggered if s == "started"} == run
        repeats = sum(triggered.values()) - len(triggered)
        print(f"{type(service).__name__}: {len(alerts.states)} requests for {len(expected)} events; "
              f"{repeats} repeated triggers folded into their open alert, "
              f"{len(alerts.unmatched)} repeated resolves dropped")


def test_a_trigger_repeated_after_a_sigkill_mid_request_folds_into_its_open_alert(simulator, agents,
                                                                                   tmp_path) -> None:
    with PagerDutyReceiver(ROUTING_KEY) as pagerduty:
        config = tmp_path / "agent.toml"
        config.write_text(f'[[sinks]]\ntype = "pagerduty"\nurl = "{pagerduty.url}"\n'
                          'routing_key_env = "PD_KEY"\n')
        args = ["--config", str(config), "--imds-url", simulator.url, "--state-dir", str(tmp_path / "s"),
                "--poll-interval", "0.1"]
        pagerduty.hold = 30.0  # PagerDuty took the trigger; its answer never reaches the agent
        agent = AgentProcess(args, env={"PD_KEY": ROUTING_KEY}, log_path=tmp_path / "agent.log").start()
        agents.append(agent)
        event_id = simulator.sim.add_event({"EventType": "Reboot", "NotBeforeInSeconds": 3600})["EventId"]
        wait_for(lambda: pagerduty.alerts.opened, timeout=30, what="the trigger to reach PagerDuty")
        agent.kill()

        again = AgentProcess(args, env={"PD_KEY": ROUTING_KEY}, log_path=tmp_path / "agent.log").start()
        agents.append(again)
        wait_for(lambda: pagerduty.alerts.folded, timeout=30, what="the trigger sent again")
        simulator.sim.delete_event(event_id)
        wait_for(lambda: pagerduty.alerts.closed, timeout=30, what="the resolve")
        assert again.terminate() == 0

    assert dict(pagerduty.alerts.opened) == {event_id: 1}  # the repeat opened no second alert
    assert dict(pagerduty.alerts.folded) == {event_id: 1}
    assert dict(pagerduty.alerts.closed) == {event_id: 1} and pagerduty.errors == []
