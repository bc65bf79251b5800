"""docs/simulator.md's "A coordinator against the simulator", as a user runs it: only
commands (``se-forwarder simulate --topology fleet.json --attestation-dir ca``, ``fleet keygen``,
an agent per VM, ``coordinator run``) and the page's own configuration files, read from the page.

Stand-ins for what cannot run here, as the page allows: the local Event Hubs broker of the tests
(tests/eventhubs/broker.py) for the Event Hub, and Azurite for storage and queues. The coordinator
requires signed reports (its default) and trusts only the CA the simulator wrote to ``ca/``; its
``/metrics`` must show every VM registered and no report refused or left waiting.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.azurite import Azurite
from tests.eventhubs.broker import EventHubsBroker
from tests.support.paths import ROOT
from tests.support.ports import free_port
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
PAGE = ROOT / "docs" / "simulator.md"
VMS = ["web-0", "web-1", "web-2", "api_0", "api_1"]


def section() -> str:
    text = PAGE.read_text()
    start = text.index("\n## A coordinator against the simulator\n")
    return text[start:text.index("\n## ", start + 1)]


def files() -> dict[str, str]:
    """The page's files: its TOML blocks by the name their first line gives (``# agent.toml: ...``),
    and its one JSON block, ``fleet.json``."""
    blocks = re.findall(r"```toml\n(.*?)```", section(), re.S)
    [topology] = re.findall(r"```json\n(.*?)```", section(), re.S)
    return {"fleet.json": topology, **{re.match(r"# ([\w.-]+)", b)[1]: b for b in blocks}}


def commands() -> list[str]:
    [shell] = re.findall(r"```bash\n(.*?)```", section(), re.S)
    return [ln.strip() for ln in shell.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


class Processes:
    """Every process the steps start, each with its log; SIGTERM (then SIGKILL) at the end."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.cwd, self.env = cwd, env
        self.started: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = self.cwd / f"{name}.log"
        proc = subprocess.Popen([sys.executable, "-m", "se_forwarder", *args], cwd=self.cwd, env=self.env,
                                stdout=log.open("wb"), stderr=subprocess.STDOUT)
        self.started.append((proc, log))
        return proc

    def dump(self) -> None:
        """Each process's log's end (a step failed: what each saw)."""
        for proc, log in self.started:
            tail = log.read_text(errors="replace")[-3000:]
            print(f"--- {log.name} (running: {proc.poll() is None}) ---\n{tail}")

    def stop(self) -> None:
        for proc, _ in reversed(self.started):
            if proc.poll() is None:
                proc.terminate()
        for proc, log in self.started:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            if proc.returncode not in (0, -15):
                tail = log.read_text(errors="replace")[-3000:]
                print(f"--- {log.name} (exit {proc.returncode}) ---\n{tail}")


@pytest.fixture
def parts(tmp_path: Path) -> Iterator[tuple[EventHubsBroker, Azurite, Azurite]]:
    with EventHubsBroker(eventhub="scheduled-events") as broker:
        blob, queue = Azurite("blob", workdir=tmp_path), Azurite("queue", workdir=tmp_path)
        blob.start()
        queue.start()
        try:
            yield broker, blob, queue
        finally:
            queue.stop()
            blob.stop()


def metrics(url: str) -> dict[str, dict[str, float]]:
    from prometheus_client.parser import text_string_to_metric_families

    text = requests.get(url + "/metrics", timeout=5, proxies={"http": ""}).text
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[",".join(sample.labels.values())] = sample.value
    return out


def test_the_documented_coordinator_trial_registers_every_vm_and_refuses_nothing(tmp_path, parts) -> None:
    broker, blob, queue = parts
    steps = commands()
    for expected in ("se-forwarder simulate --topology fleet.json --attestation-dir ca",
                     "se-forwarder fleet keygen --out coordinator-signing.key",
                     "se-forwarder run --config agent.toml --imds-url http://127.0.0.1:8099/vm/$vm "
                     "--state-dir state/$vm",
                     "se-forwarder coordinator run --config coordinator.toml"):
        assert any(line.startswith(expected) for line in steps), expected
    assert f"for vm in {' '.join(VMS)}; do" in steps
    api, imds = free_port(), free_port()
    for name, text in files().items():
        (tmp_path / name).write_text(text.replace("127.0.0.1:8480", f"127.0.0.1:{api}"))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "EH_CONN": broker.connection_string(),
           "BLOB_CONN": blob.connection_string, "QUEUE_CONN": queue.connection_string}
    run = Processes(tmp_path, env)
    try:
        simulator = run.start("simulate", "simulate", "--topology", "fleet.json", "--attestation-dir", "ca",
                              "--time-scale", "10", "--port", str(imds))
        printed = tmp_path / "simulate.log"
        wait_for(lambda: "intermediate  ca/attestation-intermediate.pem" in printed.read_text(),
                 timeout=30, what="the simulator to print where its CA is")
        assert simulator.poll() is None
        keygen = subprocess.run([sys.executable, "-m", "se_forwarder", "fleet", "keygen", "--out",
                                 "coordinator-signing.key"], cwd=tmp_path, env=env, capture_output=True,
                                text=True, timeout=60)
        assert keygen.returncode == 0, keygen.stderr
        token = tmp_path / "api.token"
        token.write_text(f"me {os.urandom(24).hex()}\n")
        token.chmod(0o600)
        for vm in VMS:
            run.start(f"agent-{vm}", "run", "--config", "agent.toml", "--imds-url",
                      f"http://127.0.0.1:{imds}/vm/{vm}", "--state-dir", f"state/{vm}")
        coordinator = run.start("coordinator", "coordinator", "run", "--config", "coordinator.toml")
        url = f"http://127.0.0.1:{api}"
        prefix = "se_forwarder_coordinator_"

        def registered() -> bool:
            return metrics(url).get(prefix + "identities", {}).get("") == len(VMS)

        wait_for(registered, timeout=180, what="every VM registered with the coordinator")
        reboot = {"EventType": "Reboot", "Resources": ["web-1"], "NotBeforeInSeconds": 1800}
        added = requests.post(f"http://127.0.0.1:{imds}/control/events", json=reboot, timeout=5,
                              proxies={"http": ""})
        assert added.status_code == 201, added.text

        def folded(kind: str) -> float:
            return metrics(url).get(prefix + "folded_total", {}).get(kind, 0.0)

        # The three VMs of the availability set report it, each signed with its registered key.
        wait_for(lambda: folded("scheduled") >= 3, timeout=120, what="the Reboot folded from the web VMs")
        seen = metrics(url)
        assert coordinator.poll() is None
    except BaseException:
        run.dump()
        raise
    finally:
        run.stop()
    refused = seen[prefix + "refused_total"]
    assert {"unsigned", "unregistered", "bad-signature"} <= set(refused)
    assert set(refused.values()) == {0.0}, {reason: n for reason, n in refused.items() if n}
    assert seen[prefix + "waiting"] == {"": 0.0}
    assert seen[prefix + "vms"][""] >= len(VMS)
    assert seen[prefix + "folded_total"]["heartbeat"] >= len(VMS)
