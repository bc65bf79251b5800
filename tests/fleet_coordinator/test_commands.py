"""``se-forwarder coordinator ...`` with bad input: one clear line and a non-zero exit, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from se_forwarder.approvals import signing
from se_forwarder.cli import main
from tests.support.ports import free_port

GOOD = """
[coordinator]
name = "prod"
[eventhub]
fully_qualified_namespace = "ns.servicebus.windows.net"
[storage]
account_url = "https://acct.blob.core.windows.net"
[queues]
account_url = "https://acct.queue.core.windows.net"
[signing]
key_file = "{key}"
[api]
listen = "127.0.0.1:{port}"
token_file = "{token}"
"""


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    token = tmp_path / "api.token"
    token.write_text("a-token-of-enough-length-0123456789\n")
    key = tmp_path / "signing.key"
    key.write_bytes(signing.private_key_pem(signing.generate_private_key()))
    return {"token": token, "key": key, "dir": tmp_path}


def config(files: dict[str, Path], extra: str = "", port: int = 8470, **replace: str) -> Path:
    text = GOOD.format(key=files["key"], token=files["token"], port=port)
    for old, new in replace.items():
        text = text.replace(old, new)
    path = files["dir"] / "coordinator.toml"
    path.write_text(text + extra)
    return path


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["coordinator", *args], env={"SE_FORWARDER_COORDINATOR_CONFIG": ""})
    assert "Traceback" not in result.output
    return result.exit_code, result.output.strip()


def one_error(output: str) -> str:
    lines = output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("se-forwarder: error: "), output
    return lines[0]


def test_run_without_a_config_says_how_to_give_one() -> None:
    code, out = run("run", "--config", "/nonexistent/coordinator.toml")
    assert code != 0
    assert "/nonexistent/coordinator.toml: cannot be read" in one_error(out)


def test_an_unknown_section_is_named(files: dict[str, Path]) -> None:
    code, out = run("check", "--config", str(config(files, "[polcy]\nshadow = true\n")))
    assert code != 0
    assert "unknown section or key 'polcy'" in one_error(out)


def test_a_missing_signing_key_says_how_to_make_one(files: dict[str, Path]) -> None:
    path = config(files, **{"[signing]\nkey_file": "[signing]\n# key_file"})
    code, out = run("run", "--config", str(path))
    assert code != 0
    assert "signing: give one of key_file" in one_error(out)


def test_a_connection_string_itself_in_place_of_its_variable_name_is_refused(files: dict[str, Path]) -> None:
    path = config(files, **{'fully_qualified_namespace = "ns.servicebus.windows.net"':
                            'credential = "connection-string"\n'
                            'connection_string_env = "Endpoint=sb://x/;SharedAccessKey=y"'})
    code, out = run("run", "--config", str(path))
    assert code != 0
    line = one_error(out)
    assert "is not an environment variable name" in line and "SharedAccessKey=y" not in line


def test_a_bad_budget_is_named(files: dict[str, Path]) -> None:
    path = config(files, '[[budgets]]\nscope = "rack"\nmax_unavailable = 1\n')
    code, out = run("run", "--config", str(path))
    assert code != 0
    assert "budgets" in one_error(out)


def test_status_with_no_coordinator_running_says_so(files: dict[str, Path]) -> None:
    code, out = run("status", "--config", str(config(files, port=free_port())))
    assert code != 0
    assert "cannot reach the coordinator" in one_error(out)


def test_a_short_token_is_refused_before_anything_is_sent(files: dict[str, Path]) -> None:
    files["token"].write_text("short\n")
    code, out = run("pause", "--config", str(config(files, port=free_port())), "--reason", "x")
    assert code != 0
    assert "a token must be at least 16 characters" in one_error(out)


def test_control_commands_require_a_reason(files: dict[str, Path]) -> None:
    code, out = run("hold", "SOME-EVENT", "--config", str(config(files)))
    assert code != 0
    assert "--reason" in out


KEY = "c2VjcmV0LWtleS1mb3ItdGVzdHM="
PLAINTEXT = {
    "eventhub": ('fully_qualified_namespace = "ns.servicebus.windows.net"',
                 "Endpoint=sb://10.9.9.9:5672;SharedAccessKeyName=k;SharedAccessKey=" + KEY
                 + ";EntityPath=scheduled-events;UseDevelopmentEmulator=true",
                 ("UseDevelopmentEmulator=true", "10.9.9.9", "not loopback")),
    "storage": ('account_url = "https://acct.blob.core.windows.net"',
                "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=" + KEY
                + ";EndpointSuffix=core.windows.net",
                ("DefaultEndpointsProtocol=http", "acct", "not loopback")),
    "queues": ('account_url = "https://acct.queue.core.windows.net"',
               "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + KEY
               + ";QueueEndpoint=http://queues.example.com/acct",
               ("queueendpoint is http://", "queues.example.com", "not loopback")),
}


@pytest.mark.parametrize("command", ["run", "check"])
@pytest.mark.parametrize("part", sorted(PLAINTEXT))
def test_a_plaintext_connection_string_to_a_remote_host_is_refused_in_one_line(
        files: dict[str, Path], part: str, command: str) -> None:
    setting, conn, words = PLAINTEXT[part]
    path = config(files, **{setting: 'credential = "connection-string"\nconnection_string_env = "CONN"'})
    result = CliRunner().invoke(main, ["coordinator", command, "--config", str(path)],
                                env={"SE_FORWARDER_COORDINATOR_CONFIG": "", "CONN": conn})
    assert result.exit_code == 2, result.output
    line = one_error(result.output.strip())
    assert f"{part}.connection_string_env: " in line and all(w in line for w in words), line
    assert KEY not in result.output


def test_check_warns_when_group_or_others_can_read_the_signing_key_or_the_token_file(
        files: dict[str, Path]) -> None:
    from se_forwarder.fleet.coordinator import check
    from se_forwarder.fleet.coordinator.config import load

    settings = load(config(files))
    files["key"].chmod(0o640)
    files["token"].chmod(0o604)
    key_ok, key_text = check._key(settings)
    token_ok, token_text = check._token(settings)
    assert key_ok == check.WARN and f"mode 0640): chmod 600 {files['key']}" in key_text
    assert token_ok == check.WARN and f"mode 0604): chmod 600 {files['token']}" in token_text
    files["key"].chmod(0o600)
    files["token"].chmod(0o400)
    assert check._key(settings)[0] is True and check._token(settings)[0] is True
