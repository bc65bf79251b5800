"""Plaintext only to loopback: an Event Hubs connection string with UseDevelopmentEmulator=true, a
Storage connection string with DefaultEndpointsProtocol=http (or an http:// endpoint) and an
http:// OTLP endpoint are refused for any other host, in one line with exit status 2, by the agent
and by the fleet commands; the same settings pointing at 127.0.0.1 (an emulator) are accepted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from se_forwarder.sinks.azure_common import plaintext_problem
from tests.support.paths import ROOT

KEY = "c2VjcmV0LWtleS1mb3ItdGVzdHM="
EVENTHUBS_EMULATOR = ("Endpoint=sb://{host}:5672;SharedAccessKeyName=k;SharedAccessKey=" + KEY
                      + ";EntityPath=hub;UseDevelopmentEmulator=true")
STORAGE_HTTP = ("DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=" + KEY
                + ";QueueEndpoint=http://{host}:10001/acct")
PUBLIC_KEY = "A" * 43 + "="


def _cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "se_forwarder", *args], cwd=ROOT, timeout=timeout,
                          env={"PATH": "/usr/bin:/bin", **(env or {})}, capture_output=True,
                          text=True)


def _refused_in_one_line(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    # (the agent may log that IMDS is unreachable before it stops: that line is JSON, not an error)
    (line,) = [x for x in result.stderr.splitlines() if not x.startswith("{")]
    assert line.startswith("se-forwarder: error: ")
    for word in words:
        assert word in line
    assert KEY not in result.stdout + result.stderr


def _config(tmp_path: Path, body: str) -> str:
    path = tmp_path / "agent.toml"
    path.write_text(f'[imds]\nurl = "http://127.0.0.1:9"\n[state]\ndir = "{tmp_path / "s"}"\n{body}')
    return str(path)


def test_agent_refuses_an_eventhubs_emulator_connection_string_to_a_remote_host(tmp_path):
    config = _config(tmp_path, '[[sinks]]\ntype = "eventhubs"\neventhub = "hub"\n'
                               'credential = "connection-string"\nconnection_string_env = "EH"\n')
    result = _cli("run", "--config", config, "--once",
                  env={"EH": EVENTHUBS_EMULATOR.format(host="eh.example.com")})
    _refused_in_one_line(result, "UseDevelopmentEmulator=true", "eh.example.com", "not loopback")


def test_agent_refuses_an_http_storage_connection_string_to_a_remote_host(tmp_path):
    config = _config(tmp_path, '[approvals.queue]\nqueue = "se-approvals-{vm_name}"\n'
                               'connection_string_env = "APPROVALS_CONN"\n'
                               'verify_keys_env = "APPROVALS_PUBLIC_KEYS"\n')
    result = _cli("run", "--config", config, "--once",
                  env={"APPROVALS_CONN": STORAGE_HTTP.format(host="queues.example.com"),
                       "APPROVALS_PUBLIC_KEYS": PUBLIC_KEY})
    _refused_in_one_line(result, "approvals.queue connection string", "http://", "not loopback")


def test_agent_refuses_an_http_otlp_endpoint_on_a_remote_host(tmp_path):
    config = _config(tmp_path, '[telemetry]\notlp_endpoint = "http://collector.example.com:4318"\n')
    _refused_in_one_line(_cli("run", "--config", config, "--once"), "telemetry.otlp_endpoint",
                         "not loopback")


def test_check_refuses_the_same_http_otlp_endpoint(tmp_path):
    config = _config(tmp_path, '[telemetry]\notlp_endpoint = "http://10.0.0.5:4318"\n')
    _refused_in_one_line(_cli("check", "--config", config), "telemetry.otlp_endpoint")


def test_fleet_approve_refuses_an_http_storage_connection_string_to_a_remote_host():
    result = _cli("fleet", "approve", "--event-id", "E-1", "--vm", "vm0",
                  "--key-file", str(ROOT / "tests" / "approvals" / "missing.pem"),
                  env={"APPROVALS_CONN": STORAGE_HTTP.format(host="queues.example.com")})
    assert "missing.pem" in result.stderr  # the key is read first: give it one
    key = subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519"], capture_output=True,
                         text=True, check=True).stdout
    result = _cli("fleet", "approve", "--event-id", "E-1", "--vm", "vm0",
                  env={"APPROVALS_KEY": key,
                       "APPROVALS_CONN": STORAGE_HTTP.format(host="queues.example.com")})
    _refused_in_one_line(result, "APPROVALS_CONN", "not loopback")


def test_fleet_tail_refuses_an_eventhubs_emulator_connection_string_to_a_remote_host():
    result = _cli("fleet", "tail", "--once",
                  env={"EH_CONN": EVENTHUBS_EMULATOR.format(host="10.1.2.3")})
    _refused_in_one_line(result, "UseDevelopmentEmulator=true", "10.1.2.3")


@pytest.mark.parametrize("conn", [
    EVENTHUBS_EMULATOR.format(host="127.0.0.1"),
    EVENTHUBS_EMULATOR.format(host="localhost"),
    STORAGE_HTTP.format(host="127.0.0.1"),
    STORAGE_HTTP.format(host="[::1]"),
    "UseDevelopmentStorage=true",
    "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + KEY,
    "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=" + KEY,
])
def test_loopback_emulators_and_tls_are_accepted(conn):
    assert plaintext_problem(conn) is None


@pytest.mark.parametrize("conn", [
    EVENTHUBS_EMULATOR.format(host="ns.servicebus.windows.net"),
    "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=" + KEY,
    "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + KEY
    + ";QueueEndpoint=http://acct.queue.core.windows.net",
    STORAGE_HTTP.format(host="127.0.0.1.example.com"),
])
def test_plaintext_to_anything_else_is_refused(conn):
    assert "not loopback" in plaintext_problem(conn)
