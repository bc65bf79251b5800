"""Turning Azure's side on: ``se-forwarder simulate`` flags, ``AzureOptions``, the topology's
``agentless`` and ``orchestration`` keys, and the managed-identity endpoint."""

from __future__ import annotations

import time

import pytest
import requests
from click.testing import CliRunner

from se_forwarder.cli.simulate import simulate_command
from se_forwarder.simulator import SimulatorServer
from se_forwarder.simulator.azure_side import AzureOptions
from se_forwarder.simulator.topology import Topology, TopologyError


def test_simulate_with_arm_port_says_where_arm_listens_and_writes_the_ca(cli_simulator, tmp_path):
    ca = tmp_path / "ca.pem"
    cli = cli_simulator("--quiet", "--arm-port", "0", "--ca-file", str(ca))
    deadline = time.monotonic() + 10
    while not any("ARM simulator listening on https://127.0.0.1:" in line for line in cli.lines):
        assert time.monotonic() < deadline, cli.lines
        time.sleep(0.05)
    line = next(line for line in cli.lines if "ARM simulator" in line)
    assert f"trust the test CA in {ca}" in line and "/metadata/identity/oauth2/token" in line
    assert ca.read_bytes().startswith(b"-----BEGIN CERTIFICATE-----")
    assert cli.stop() == 0


@pytest.mark.parametrize(
    "args, named",
    [
        (
            ["--feed-connection-string-env", "SE_FORWARDER_TEST_UNSET_VARIABLE"],
            "SE_FORWARDER_TEST_UNSET_VARIABLE",
        ),
        (["--ca-file", "ca.pem"], "--ca-file goes with --arm-port"),
        (["--arm-port", "70000"], "--arm-port"),
        (["--feed-event-type", "ScheduledEventEmitted"],
         "--feed-event-type with --feed-connection-string-env"),
        (["--arm-port", "0", "--feed-event-type", "x"], "--feed-event-type 'x' is not one of "
         "Microsoft.ResourceNotifications.MaintenanceResources.ScheduledEventEmitted, "
         "microsoft.maintenance/scheduledevents/write"),
        (["--attestation-dir", "/proc/version"],
         "--attestation-dir /proc/version: is a file, not a directory"),
        (["--attestation-dir", "/proc/no/such"],
         "--attestation-dir /proc/no/such: cannot make the directory"),
    ],
)
def test_a_bad_azure_flag_is_one_line_and_exit_2(args, named):
    result = CliRunner().invoke(simulate_command, ["--port", "0", *args])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and named in lines[-1], result.output


def test_the_imds_token_endpoint_hands_out_the_arm_token_only_with_metadata_true():
    with SimulatorServer(azure=AzureOptions(token="t-123")) as server:
        url = f"{server.url}/metadata/identity/oauth2/token?api-version=2018-02-01&resource=https://management.azure.com"
        good = requests.get(url, headers={"Metadata": "true"}, timeout=5)
        bad = requests.get(url, timeout=5)
    assert (good.status_code, good.json()["access_token"], good.json()["token_type"]) == (
        200,
        "t-123",
        "Bearer",
    )
    assert bad.status_code == 400


def test_without_azure_options_the_token_endpoint_and_arm_control_routes_do_not_exist():
    with SimulatorServer() as server:
        token = requests.get(
            f"{server.url}/metadata/identity/oauth2/token", headers={"Metadata": "true"}, timeout=5
        )
        control = requests.get(f"{server.url}/control/arm", timeout=5)
    assert (token.status_code, control.status_code) == (404, 404)


def test_agentless_vms_and_orchestration_are_in_the_topology():
    topology = Topology.build(
        availability_sets=[{"name": "db", "vms": 3, "agentless": ["db-2"]}],
        scale_sets=[{"name": "f", "vms": 2, "orchestration": "flexible"}],
    )
    assert topology.agentless == frozenset({"db-2"})
    assert topology.describe()["groups"][1]["orchestration"] == "flexible"
    assert "resourceId" not in topology.compute_overrides("f_0")  # a flexible VM is a plain VM id


@pytest.mark.parametrize(
    "group, named",
    [
        ({"name": "db", "vms": 2, "agentless": ["web-0"]}, "agentless"),
        ({"name": "db", "vms": 2, "agentless": "db-0"}, "agentless"),
    ],
)
def test_a_bad_agentless_list_names_the_key(group, named):
    with pytest.raises(TopologyError, match=named):
        Topology.build(availability_sets=[group])


def test_an_unknown_orchestration_names_the_choices():
    with pytest.raises(TopologyError, match="uniform, flexible"):
        Topology.build(scale_sets=[{"name": "s", "vms": 1, "orchestration": "mixed"}])


def test_bad_azure_settings_through_the_control_api_are_a_400():
    with SimulatorServer(azure=AzureOptions()) as server:
        roles = requests.post(f"{server.url}/control/arm", json={"roles": {"query": "no"}}, timeout=5)
        fault = requests.post(f"{server.url}/control/arm/faults", json={"status": 200}, timeout=5)
        ok = requests.post(f"{server.url}/control/arm/faults", json={"status": 503, "count": 2}, timeout=5)
    assert roles.status_code == 400 and "roles" in roles.json()["error"]
    assert fault.status_code == 400 and "status" in fault.json()["error"]
    assert ok.status_code == 201 and ok.json() == [
        {"status": 503, "count": 2, "route": "any", "retry_after": None}
    ]
