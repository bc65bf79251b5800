"""Fleet fan-in, for real: one agent process per simulated VM, all sending to one Event Hubs broker.

The simulator serves every VM under ``/vm/<name>`` (IMDS as documented: no ETag), and the VMs
share one event list, so a burst of events reaches every agent. Each agent is `se-forwarder run`
with the Event Hubs sink (connection string, structured mode, heartbeats on), polling once a
second as in production, against the qpid-proton broker of ``tests/eventhubs/broker.py``.

Measured: the agents' total CPU and each one's RSS while idle (heartbeats only); the events per
second the broker stores while every agent sends the same burst of events; and the time from each
IMDS change to its event being stored at the broker (enqueued time), p50/p99 over every
(VM, event). The broker is Python on the same 2 cores as the agents and the simulator, so the
burst rate is a floor; ``bench/findings.md`` scales the figures to 10,000 VMs on a real hub.

Run: python -m bench.fleet_fanin [--agents 50] [--events 20]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import psutil

from bench.common import Row, agent, cpu_seconds, percentile, wait_for
from se_forwarder.simulator import SimulatorServer
from tests.eventhubs.broker import EventHubsBroker

AGENTS = 50
EVENTS = 20
POLL = 1.0
HEARTBEAT = 10  # seconds: several heartbeats per agent inside the idle window
IDLE_WINDOW = 30.0
HEARTBEAT_TYPE = "com.azure.scheduledevents.heartbeat"


def _config(path: Path, conn_env: str) -> Path:
    path.write_text(
        "[approvals]\nrules = []\n\n"
        '[[sinks]]\ntype = "eventhubs"\nname = "hub"\neventhub = "scheduled-events"\n'
        f'credential = "connection-string"\nconnection_string_env = "{conn_env}"\n'
        f"heartbeat_interval = {HEARTBEAT}\n"
    )
    return path


def _stored(broker: EventHubsBroker) -> list[tuple[dict, float]]:
    """(structured CloudEvent, enqueued unix time) of everything the broker stored."""
    out = []
    for stored in broker.all_messages():
        out.append((json.loads(stored.message().body), stored.enqueued_time_ms / 1000))
    return out


def measure(agents: int = AGENTS, events: int = EVENTS) -> dict[str, float]:
    names = tuple(f"vm{i:02d}" for i in range(agents))
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, EventHubsBroker() as broker, SimulatorServer(
        vm_names=names, etag=False
    ) as sim:
        work = Path(tmp)
        config = _config(work / "agent.toml", "BENCH_EH_CONN")
        env = {"BENCH_EH_CONN": broker.connection_string()}
        procs = []
        try:
            for name in names:
                procs.append(agent(["--config", str(config), "--imds-url", sim.vm_url(name),
                                    "--state-dir", str(work / name), "--poll-interval", str(POLL),
                                    "--dry-run"], env=env, log=work / f"{name}.log"))
                time.sleep(0.1)  # spread the imports a little

            def heartbeating() -> bool:
                seen = {e["source"] for e, _ in _stored(broker) if e["type"] == HEARTBEAT_TYPE}
                return len(seen) >= agents

            began = time.monotonic()
            wait_for(heartbeating, timeout=60 + 6 * agents, interval=1.0,
                     what=f"a heartbeat from each of {agents} agents")
            figures["start_s"] = time.monotonic() - began
            time.sleep(HEARTBEAT)  # the start-up is over for every agent
            ps = [psutil.Process(p.pid) for p in procs]
            cpu0 = sum(cpu_seconds(p) for p in ps)
            time.sleep(IDLE_WINDOW)
            cpu1 = sum(cpu_seconds(p) for p in ps)
            rss = [p.memory_info().rss / 1e6 for p in ps]
            figures["cpu_total_pct"] = (cpu1 - cpu0) / IDLE_WINDOW * 100
            figures["cpu_per_agent_ms_s"] = (cpu1 - cpu0) / IDLE_WINDOW / agents * 1000
            figures["rss_mean"] = sum(rss) / len(rss)
            figures["rss_max"] = max(rss)

            added: dict[str, float] = {}
            for _ in range(events):
                at = time.time()
                added[sim.sim.add_event({"EventType": "Freeze"})["EventId"]] = at
            want = agents * events

            def burst() -> list[tuple[dict, float]]:
                return [(e, t) for e, t in _stored(broker)
                        if e["type"].endswith(".scheduled") and e["subject"] in added]

            wait_for(lambda: len(burst()) >= want, timeout=300, interval=1.0,
                     what=f"{want} burst events at the broker")
            got = burst()
            enqueued = sorted(t for _, t in got)
            latencies = [t - added[e["subject"]] for e, t in got]
            span = enqueued[-1] - enqueued[0]
            figures["burst_events"] = len(got)
            figures["burst_span_s"] = span
            figures["burst_rate"] = len(got) / span if span > 0 else float("nan")
            figures["first_change_to_last_s"] = enqueued[-1] - min(added.values())
            figures["p50_s"] = percentile(latencies, 0.50)
            figures["p99_s"] = percentile(latencies, 0.99)
            figures["max_s"] = max(latencies)
            figures["duplicates"] = len(got) - len({(e["source"], e["id"]) for e, _ in got})
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(15)
                except Exception:  # noqa: BLE001 - a stuck agent must not hide the figures
                    p.kill()
    figures["agents"], figures["events"] = agents, events
    return figures


def rows(f: dict[str, float]) -> list[Row]:
    n, k = int(f["agents"]), int(f["events"])
    return [
        Row("fleet fan-in", f"{n} agents (Event Hubs sink, heartbeats every {HEARTBEAT} s, poll "
            f"{POLL:g} s): all heartbeating after", f"{f['start_s']:.0f} s"),
        Row("fleet fan-in", f"total CPU of {n} idle agents", f"{f['cpu_total_pct']:.1f}% of one core",
            "", f"{f['cpu_per_agent_ms_s']:.2f} ms CPU per agent per second"),
        Row("fleet fan-in", "RSS per agent (Event Hubs loaded and connected)",
            f"mean {f['rss_mean']:.1f} MB, max {f['rss_max']:.1f} MB"),
        Row("fleet fan-in", f"burst: {n} agents x {k} events at the broker",
            f"{f['burst_rate']:,.0f} events/s", "",
            f"{int(f['burst_events'])} events over {f['burst_span_s']:.2f} s; "
            f"{int(f['duplicates'])} duplicates; local Python broker on the same 2 cores"),
        Row("fleet fan-in", "IMDS change -> event stored at the broker",
            f"p50 {f['p50_s'] * 1000:.0f} ms, p99 {f['p99_s'] * 1000:.0f} ms",
            "", f"max {f['max_s'] * 1000:.0f} ms; last of the burst {f['first_change_to_last_s']:.2f} s "
            "after the first change"),
    ]


def run() -> list[Row]:
    return rows(measure())


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet_fanin")
    parser.add_argument("--agents", type=int, default=AGENTS)
    parser.add_argument("--events", type=int, default=EVENTS)
    args = parser.parse_args()
    for row in rows(measure(args.agents, args.events)):
        print(f"{row.figure}: {row.value}" + (f"  ({row.note})" if row.note else ""))


if __name__ == "__main__":
    main()
