"""Each gate type asked for real by the coordinator's gate watch (input/gates.py): Debian's
Alertmanager on loopback, a local HTTP server, and the simulator's Resource Graph (Azure Monitor
cannot run here, so the simulator plays its fired alerts; the query goes through the real
``azure-mgmt-resourcegraph`` client over HTTPS with a managed-identity token from its IMDS)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from se_forwarder.errors import ConfigError
from se_forwarder.fleet.coordinator.config.azure import load_azure
from se_forwarder.fleet.coordinator.config.gates import load_gates
from se_forwarder.fleet.coordinator.fold.state import FleetState
from se_forwarder.fleet.coordinator.input.gates import GateWatch
from se_forwarder.simulator import SimulatorServer
from se_forwarder.simulator.azure_side import AzureOptions
from se_forwarder.simulator.topology import Topology
from se_forwarder.simulator.wire import DEFAULT_SUBSCRIPTION_ID
from tests.support.alertmanager import alert
from tests.support.azure_side import managed_identity
from tests.support.ports import free_port
from tests.support.waiting import wait_for


def watched(*gates: dict[str, Any], azure: Any = None) -> GateWatch:
    return GateWatch(load_gates(list(gates), azure=azure is not None), azure)


def verdict(watch: GateWatch, name: str, wanted: Any, what: str) -> Any:
    """The gate's verdict once ``wanted(verdict)`` holds (the watch asks on its own thread)."""
    found: list[Any] = []

    def ready() -> bool:
        state = FleetState()
        watch.pump(state)
        found[:] = [state.gates[name]]
        return bool(wanted(found[0]))
    wait_for(ready, 15, what)
    return found[0]


# -- Alertmanager -----------------------------------------------------------------------------------

def am_gate(url: str, *matchers: str) -> dict[str, Any]:
    return {"name": "am", "type": "alertmanager", "url": url, "matchers": list(matchers),
            "interval": "1s", "timeout": "2s"}


def test_only_active_alerts_matching_every_matcher_close_the_gate_and_are_named(alertmanager):
    alertmanager.post(alert("HighCpu", service="web", severity="page"), alert("DiskFull", service="db"))
    watch = watched(am_gate(alertmanager.url, 'service="web"', 'severity=~"page|critical"'))
    watch.start()
    try:
        said = verdict(watch, "am", lambda v: v.checked is not None, "the gate's first answer")
    finally:
        watch.close()
    assert not said.open and not said.unreachable
    assert said.alerts == ("HighCpu (service=web, severity=page)",)
    assert said.reason == "1 alert fires in Alertmanager: HighCpu (service=web, severity=page)"


def test_a_silenced_alert_does_not_close_the_gate(alertmanager):
    alertmanager.post(alert("HighCpu", service="web"))
    alertmanager.silence({"alertname": "HighCpu"})
    watch = watched(am_gate(alertmanager.url, 'service="web"'))
    watch.start()
    try:
        said = verdict(watch, "am", lambda v: v.checked is not None, "the gate's first answer")
    finally:
        watch.close()
    assert said.open and said.reason == "no matching alert fires in Alertmanager"


def test_the_gate_opens_once_the_alert_resolves(alertmanager):
    firing = alert("HighCpu", service="web")
    alertmanager.post(firing)
    watch = watched(am_gate(alertmanager.url, 'service="web"'))
    watch.start()
    try:
        verdict(watch, "am", lambda v: v.checked is not None and not v.open, "the gate to close")
        alertmanager.post({**firing, "endsAt": datetime.now(UTC).isoformat().replace("+00:00", "Z")})
        said = verdict(watch, "am", lambda v: v.open, "the gate to open")
    finally:
        watch.close()
    assert said.alerts == () and said.since is not None


def test_a_matcher_alertmanager_refuses_closes_the_gate_saying_what_it_answered(alertmanager):
    watch = watched(am_gate(alertmanager.url, 'service=~"("'))  # a regular expression that is not one
    watch.start()
    try:
        said = verdict(watch, "am", lambda v: v.checked is not None, "the gate's first answer")
    finally:
        watch.close()
    assert not said.open and said.unreachable and "Alertmanager answered 400" in said.reason


# -- any URL ------------------------------------------------------------------------------------------

class Answers(BaseHTTPRequestHandler):
    status = 503
    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).seen.append(self.path + " " + self.headers.get("Authorization", ""))
        body = b"deploy in progress" if self.status != 200 else b"quiet"
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def answers() -> Iterator[tuple[str, type[Answers]]]:
    handler = type("Handler", (Answers,), {"status": 409, "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def test_an_http_gate_is_open_on_2xx_and_closed_otherwise_saying_the_status(answers, monkeypatch):
    url, handler = answers
    monkeypatch.setenv("GATE_TOKEN", "s3cret-token-value")
    watch = watched({"name": "deploys", "type": "http", "url": f"{url}/quiet?service=web",
                     "interval": "1s", "token_env": "GATE_TOKEN"})
    watch.start()
    try:
        closed = verdict(watch, "deploys", lambda v: v.checked is not None, "the gate's first answer")
        handler.status = 200
        opened = verdict(watch, "deploys", lambda v: v.open, "the gate to open")
    finally:
        watch.close()
    assert not closed.open and not closed.unreachable
    assert closed.reason == f"{url}/quiet answered 409: deploy in progress"
    assert opened.reason == f"{url}/quiet answered 200"
    assert handler.seen[0] == "/quiet?service=web Bearer s3cret-token-value"


def test_a_gate_nobody_listens_on_is_closed_and_says_it_cannot_be_asked():
    watch = watched({"name": "deploys", "type": "http", "url": f"http://127.0.0.1:{free_port()}/",
                     "interval": "1s", "timeout": "1s"})
    watch.start()
    try:
        said = verdict(watch, "deploys", lambda v: v.checked is not None, "the gate's first answer")
    finally:
        watch.close()
    assert not said.open and said.unreachable and said.reason.endswith("counted as closed")


def test_a_gate_token_that_is_not_there_stops_the_start_in_one_line(monkeypatch):
    monkeypatch.delenv("GATE_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="gates 'g'.token_env: the variable GATE_TOKEN is not set"):
        watched({"name": "g", "type": "http", "url": "https://deploy.example/ok", "token_env": "GATE_TOKEN"})


# -- Azure Monitor through Resource Graph ----------------------------------------------------------------

@pytest.fixture(scope="module")
def azure_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimulatorServer, Path]]:
    ca = tmp_path_factory.mktemp("arm") / "ca.pem"
    topology = Topology.build(availability_sets=[{"name": "web", "vms": 2}])
    with SimulatorServer(topology=topology, azure=AzureOptions(arm_port=0, ca_path=ca)) as server:
        yield server, ca


def test_fired_azure_monitor_alerts_close_the_gate_until_they_resolve(azure_sim):
    server, ca = azure_sim
    assert server.azure is not None
    azure = load_azure({"subscriptions": [DEFAULT_SUBSCRIPTION_ID], "arm_endpoint": server.azure.arm_url,
                        "ca_file": str(ca)})
    control = requests.Session()
    control.trust_env = False
    control.post(f"{server.url}/control/alerts", timeout=5,
                 json={"name": "HighCpu", "severity": "Sev1", "target": "web-0"}).raise_for_status()
    control.post(f"{server.url}/control/alerts", json={"name": "Chatty", "severity": "Sev4"},
                 timeout=5).raise_for_status()
    with managed_identity(server):
        watch = watched({"name": "azure", "type": "azure-monitor", "severities": ["Sev0", "Sev1"],
                         "interval": "1s", "timeout": "10s"}, azure=azure)
        watch.start()
        try:
            closed = verdict(watch, "azure", lambda v: v.checked is not None, "the gate's first answer")
            control.patch(f"{server.url}/control/alerts/HighCpu", json={"monitorCondition": "Resolved"},
                          timeout=5).raise_for_status()
            opened = verdict(watch, "azure", lambda v: v.open, "the gate to open")
        finally:
            watch.close()
    assert not closed.open and closed.alerts == ("HighCpu (Sev1, web-0)",), closed.reason
    assert opened.reason == "no fired Azure Monitor alert"


# -- coordinator check ---------------------------------------------------------------------------------

def test_check_says_each_gate_answers_and_how(alertmanager):
    from se_forwarder.fleet.coordinator.check import WARN, gate_result

    alertmanager.post(alert("HighCpu", service="web"))
    settings: Any = type("Settings", (), {"azure": None})()
    firing, down, down_open = load_gates([am_gate(alertmanager.url, 'service="web"'),
                                          {"name": "down", "type": "http", "url": f"http://127.0.0.1:{free_port()}/"},
                                          {"name": "lenient", "type": "http", "unreachable": "open",
                                           "url": f"http://127.0.0.1:{free_port()}/"}], azure=False)
    assert gate_result(firing, settings) == (True, "alertmanager for fleet: closed: 1 alert fires in "
                                             "Alertmanager: HighCpu (service=web)")
    ok, text = gate_result(down, settings)
    assert ok is False and text.startswith("http for fleet: closed: cannot be asked (")
    assert gate_result(down_open, settings)[0] == WARN
