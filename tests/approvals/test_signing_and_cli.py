"""The signature's canonical form, keys, queue names and configuration, and the CLI commands
`fleet keygen`, `fleet approve` (errors and --print-only) and the local `approve`."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import stat

import pytest
from click.testing import CliRunner

from se_forwarder import config
from se_forwarder.approvals import signing
from se_forwarder.approvals.queue import queue_name
from se_forwarder.cli import main
from se_forwarder.errors import ConfigError
from se_forwarder.outbox import Outbox

KEY_TEXT = base64.b64encode(bytes(range(32))).decode()


def test_signature_is_hmac_sha256_over_sorted_compact_ascii_json_without_the_signature():
    message = {"type": "com.azure.scheduledevents.approve", "specversion": "1.0", "id": "m1",
               "source": "urn:c", "time": "2026-03-01T12:00:00.000Z",
               "data": {"Reason": "caf\u00e9", "EventId": "E1", "ExpiresAt": "2026-03-01T12:10:00Z"},
               "signature": "ignored"}
    expected_canonical = (
        b'{"data":{"EventId":"E1","ExpiresAt":"2026-03-01T12:10:00Z","Reason":"caf\\u00e9"},'
        b'"id":"m1","source":"urn:c","specversion":"1.0","time":"2026-03-01T12:00:00.000Z",'
        b'"type":"com.azure.scheduledevents.approve"}'
    )
    assert signing.canonical(message) == expected_canonical
    key = bytes(range(32))
    expected = base64.b64encode(hmac.new(key, expected_canonical, hashlib.sha256).digest()).decode()
    assert signing.sign(message, key) == expected
    assert signing.verify({**message, "signature": expected}, [key])
    assert not signing.verify({**message, "signature": expected, "extra": 1}, [key])


def test_several_keys_parse_from_commas_whitespace_and_comment_lines():
    second = signing.generate_key()
    keys = signing.parse_keys(f"# current first\n{KEY_TEXT}, {second}\n", "k")
    assert keys == [bytes(range(32)), base64.b64decode(second)]


@pytest.mark.parametrize("text, problem", [
    ("not-base64!!", "key #1 is not base64"),
    (base64.b64encode(b"short").decode(), "key #1 is 5 bytes"),
    ("", "no signing key"),
])
def test_bad_keys_are_named_by_position_never_quoted(text, problem):
    with pytest.raises(ConfigError, match=problem) as info:
        signing.parse_keys(text, "environment variable K")
    assert (text not in str(info.value)) or not text


def test_missing_key_variable_is_named():
    with pytest.raises(ConfigError, match="environment variable APPROVALS_KEY .* is not set"):
        signing.load_keys("APPROVALS_KEY", None, environ={})


@pytest.mark.parametrize("template, vm, expected", [
    ("se-approvals-{vm_name}", "WestNO_0", "se-approvals-westno-0"),
    ("se-approvals-{vm_name}", "web--01.", "se-approvals-web-01"),
    ("approvals-{vm_id}", "x", "approvals-0000-1111"),
])
def test_queue_names_are_made_legal_the_same_way_on_both_sides(template, vm, expected):
    assert queue_name(template, vm, "0000-1111") == expected


@pytest.mark.parametrize("queue, problem", [
    ("q-{vm}", "unknown placeholder {vm}"),
    ("{vm_name}" + "x" * 60, "must be 3-56 characters"),
])
def test_bad_queue_templates_are_config_errors(queue, problem):
    raw = {"approvals": {"queue": {"queue": queue, "connection_string_env": "C",
                                   "signing_key_env": "K"}}}
    with pytest.raises(ConfigError, match=r"approvals\.queue\.queue: .*" + problem.replace("{", r"\{")
                       .replace("}", r"\}")):
        config.from_dict(raw)


@pytest.mark.parametrize("queue, where", [
    ({"queue": "q-{vm_name}", "connection_string_env": "C"}, "approvals.queue.signing_key_env"),
    ({"queue": "q-{vm_name}", "signing_key_env": "K"}, "approvals.queue.account_url"),
    ({"queue": "q-{vm_name}", "signing_key_env": "K", "account_url": "http://acct.example"},
     "approvals.queue.account_url"),
    ({"queue": "q-{vm_name}", "signing_key_env": "K", "connection_string_env": "C",
      "visibility_timeout": 1}, "approvals.queue.visibility_timeout"),
    ({"queue": "q-{vm_name}", "signing_key_env": "K", "connection_string_env": "C", "qeue": "x"},
     "approvals.queue.qeue"),
])
def test_queue_config_errors_name_the_key(queue, where):
    with pytest.raises(ConfigError, match=where.replace(".", r"\.")):
        config.from_dict({"approvals": {"queue": queue}})


# -- CLI --------------------------------------------------------------------------------------


def test_keygen_prints_a_key_the_agent_accepts():
    result = CliRunner().invoke(main, ["fleet", "keygen"])
    assert result.exit_code == 0
    (key,) = signing.parse_keys(result.output, "keygen output")
    assert len(key) == 32


def test_keygen_writes_a_private_file_and_never_overwrites(tmp_path):
    out = tmp_path / "approvals.key"
    assert CliRunner().invoke(main, ["fleet", "keygen", "--out", str(out)]).exit_code == 0
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    signing.parse_keys(out.read_text(), str(out))
    again = CliRunner().invoke(main, ["fleet", "keygen", "--out", str(out)])
    assert again.exit_code != 0 and "not overwriting" in again.output


def test_fleet_approve_print_only_signs_with_the_first_key(tmp_path):
    keyfile = tmp_path / "keys"
    keyfile.write_text(f"{KEY_TEXT}\n{signing.generate_key()}\n")
    result = CliRunner().invoke(main, [
        "fleet", "approve", "--event-id", "C7061BAC-AFDC-4513-B24B-AA5F13A16123", "--vm", "WestNO_0",
        "--key-file", str(keyfile), "--expires-in", "90s", "--reason", "drain done", "--print-only",
    ])
    assert result.exit_code == 0, result.output
    message = json.loads(result.output)
    assert signing.verify(message, [bytes(range(32))])
    assert message["type"] == "com.azure.scheduledevents.approve"
    assert message["data"]["VmName"] == "WestNO_0" and message["data"]["Reason"] == "drain done"


@pytest.mark.parametrize("args, env, problem", [
    (["--vm", "a", "--queue", "b"], {"APPROVALS_KEY": KEY_TEXT}, "exactly one of --vm"),
    (["--vm", "a"], {}, "environment variable APPROVALS_KEY"),
    (["--vm", "a", "--expires-in", "3d"], {"APPROVALS_KEY": KEY_TEXT}, "at most 24h"),
    (["--vm", "a", "--expires-in", "soon"], {"APPROVALS_KEY": KEY_TEXT}, "not a duration"),
    (["--vm", "a"], {"APPROVALS_KEY": KEY_TEXT}, "no queue to send to"),
    (["--queue", "Bad_Name"], {"APPROVALS_KEY": KEY_TEXT}, "not a valid queue name"),
])
def test_fleet_approve_errors_are_one_line_and_non_zero(args, env, problem):
    result = CliRunner().invoke(main, ["fleet", "approve", "--event-id", "E-1", *args],
                                env={"APPROVALS_KEY": "", "APPROVALS_CONN": "",
                                     "APPROVALS_ACCOUNT_URL": "", **env})
    assert result.exit_code != 0
    assert problem in result.output
    assert "Traceback" not in result.output
    assert KEY_TEXT not in result.output


def test_local_approve_posts_and_records_approved_by_cli(simulator, control, tmp_path):
    event_id = control.add(EventType="Reboot")["EventId"]
    result = CliRunner().invoke(main, ["approve", event_id, "--imds-url", simulator.url,
                                       "--state-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert [a["EventId"] for a in control.approvals()] == [event_id]
    with Outbox(tmp_path) as box:
        (approved,) = [json.loads(e.payload) for e in box.events_for(event_id)]
    assert approved["id"] == f"{event_id}/approved"
    assert approved["data"]["ApprovedBy"] == "cli"


def test_local_approve_refuses_an_event_that_is_not_scheduled(simulator, control, tmp_path):
    event_id = control.add(EventType="Reboot", EventStatus="Started")["EventId"]
    result = CliRunner().invoke(main, ["approve", event_id, "--imds-url", simulator.url,
                                       "--state-dir", str(tmp_path)])
    assert result.exit_code != 0
    assert f"{event_id} (Started)" in result.output
    assert control.approvals() == []
