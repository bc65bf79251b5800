"""The signature's canonical form, keys, queue names and configuration, and the CLI commands
`fleet keygen`, `fleet approve` (errors, binding and --print-only) and the local `approve`."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import subprocess
import sys

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from se_forwarder import config
from se_forwarder.approvals import signing
from se_forwarder.approvals.queue import queue_name
from se_forwarder.cli import main
from se_forwarder.errors import ConfigError
from se_forwarder.outbox import Outbox

KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))  # fixed, so the bytes can be written out
KEY_PEM = signing.private_key_pem(KEY).decode()
PUBLIC_LINE = signing.public_key_line(KEY)
MESSAGE = {"type": "com.azure.scheduledevents.approve", "specversion": "1.0", "id": "m1",
           "source": "urn:c", "time": "2026-03-01T12:00:00.000Z",
           "data": {"Reason": "caf\u00e9", "EventId": "E1", "ExpiresAt": "2026-03-01T12:10:00Z"}}


def test_signature_is_ed25519_over_sorted_compact_ascii_json_with_the_keyid_without_the_signature():
    signed = signing.sign({**MESSAGE, "signature": "ignored"}, KEY)
    raw_public = base64.b64decode(PUBLIC_LINE)
    assert signed["keyid"] == hashlib.sha256(raw_public).hexdigest()[:16]
    expected_canonical = (
        b'{"data":{"EventId":"E1","ExpiresAt":"2026-03-01T12:10:00Z","Reason":"caf\\u00e9"},'
        b'"id":"m1","keyid":"' + signed["keyid"].encode() + b'","source":"urn:c",'
        b'"specversion":"1.0","time":"2026-03-01T12:00:00.000Z",'
        b'"type":"com.azure.scheduledevents.approve"}'
    )
    assert signing.canonical(signed) == expected_canonical
    signature = base64.b64decode(signed["signature"])
    assert len(signature) == 64
    Ed25519PublicKey.from_public_bytes(raw_public).verify(signature, expected_canonical)  # raises if not
    assert signing.verify(signed, [KEY.public_key()])
    assert not signing.verify({**signed, "extra": 1}, [KEY.public_key()])


def test_a_key_pair_made_by_openssl_signs_and_its_pem_public_key_verifies(tmp_path):
    private, public = tmp_path / "k.pem", tmp_path / "k.pub.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(private)], check=True)
    subprocess.run(["openssl", "pkey", "-in", str(private), "-pubout", "-out", str(public)],
                   check=True)
    key = signing.load_private_key(private.read_bytes(), "k.pem")
    (verify_key,) = signing.parse_public_keys(public.read_text(), "k.pub.pem")
    assert signing.keyid(verify_key) == signing.keyid(key)
    assert signing.verify(signing.sign(MESSAGE, key), [verify_key])


def test_several_public_keys_parse_from_commas_whitespace_comment_lines_and_pem_blocks():
    second = signing.generate_private_key()
    pem = second.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    keys = signing.parse_public_keys(f"# current first\n{PUBLIC_LINE},\n{pem}", "k")
    assert [signing.keyid(k) for k in keys] == [signing.keyid(second), signing.keyid(KEY)]


@pytest.mark.parametrize("text, problem", [
    ("not-base64!!", "key #1 is not base64"),
    (base64.b64encode(b"short").decode(), "key #1 is 5 bytes"),
    ("", "no public key"),
    (KEY_PEM, "holds a PRIVATE key"),
])
def test_bad_public_keys_are_named_by_position_never_quoted(text, problem):
    with pytest.raises(ConfigError, match=problem) as info:
        signing.parse_public_keys(text, "environment variable K")
    assert (text not in str(info.value)) or not text


def test_missing_key_variable_is_named():
    with pytest.raises(ConfigError, match="environment variable APPROVALS_PUBLIC_KEYS .* is not set"):
        signing.load_public_keys("APPROVALS_PUBLIC_KEYS", None, environ={})


@pytest.mark.parametrize("text, problem", [
    (base64.b64encode(bytes(32)).decode(), "not a PEM private key"),
    (KEY_PEM.replace("PRIVATE KEY", "RSA PRIVATE KEY"), "not a readable PKCS#8 PEM private key"),
])
def test_a_private_key_that_is_not_pkcs8_ed25519_is_refused_in_one_line(text, problem):
    with pytest.raises(ConfigError, match=problem) as info:
        signing.load_private_key(text, "--key-file k")
    assert "\n" not in str(info.value) and text not in str(info.value)


def test_an_rsa_private_key_is_refused_as_not_ed25519():
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = rsa_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    with pytest.raises(ConfigError, match="is not Ed25519"):
        signing.load_private_key(pem, "--key-file k")


@pytest.mark.parametrize("template, vm, expected", [
    ("se-approvals-{vm_name}", "WestNO-0", "se-approvals-westno-0"),
    ("se-approvals-{vm_name}", "WestNO_0", "se-approvals-westno-0-cvpcqimwz357g"),
    ("se-approvals-{vm_name}", "web--01.", "se-approvals-web-01-szvv7nijccswe"),
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
                                   "verify_keys_env": "K"}}}
    with pytest.raises(ConfigError, match=r"approvals\.queue\.queue: .*" + problem.replace("{", r"\{")
                       .replace("}", r"\}")):
        config.from_dict(raw)


@pytest.mark.parametrize("queue, where", [
    ({"queue": "q-{vm_name}", "connection_string_env": "C"}, "approvals.queue.verify_keys_env"),
    ({"queue": "q-{vm_name}", "verify_keys_env": "K"}, "approvals.queue.account_url"),
    ({"queue": "q-{vm_name}", "verify_keys_env": "K", "account_url": "http://acct.example"},
     "approvals.queue.account_url"),
    ({"queue": "q-{vm_name}", "verify_keys_env": "K", "connection_string_env": "C",
      "visibility_timeout": 1}, "approvals.queue.visibility_timeout"),
    ({"queue": "q-{vm_name}", "verify_keys_env": "K", "connection_string_env": "C", "qeue": "x"},
     "approvals.queue.qeue"),
    ({"queue": "q-{vm_name}", "verify_keys_env": "K", "connection_string_env": "C",
      "poll_interval": 2, "idle_poll_interval": 1}, "approvals.queue.idle_poll_interval"),
    ({"queue": "q-{vm_name}", "verify_keys_env": "K", "connection_string_env": "C",
      "idle_poll_interval": 601}, "approvals.queue.idle_poll_interval"),
])
def test_queue_config_errors_name_the_key(queue, where):
    with pytest.raises(ConfigError, match=where.replace(".", r"\.")):
        config.from_dict({"approvals": {"queue": queue}})


@pytest.mark.parametrize("given, poll, idle", [
    ({}, 1.0, 30.0),
    ({"poll_interval": 45}, 45.0, 45.0),
    ({"poll_interval": 0.5, "idle_poll_interval": 0.5}, 0.5, 0.5),
])
def test_an_idle_queue_is_polled_every_30_s_unless_the_poll_interval_is_longer(given, poll, idle):
    queue = {"queue": "q-{vm_name}", "verify_keys_env": "K", "connection_string_env": "C", **given}
    parsed = config.from_dict({"approvals": {"queue": queue}}).approvals.queue
    assert parsed is not None
    assert (parsed.poll_interval, parsed.idle_poll_interval) == (poll, idle)


# -- CLI --------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["signing_key_env", "signing_key_file"])
def test_an_agent_given_a_signing_key_is_refused_with_what_to_configure_instead(tmp_path, key):
    config_file = tmp_path / "agent.toml"
    config_file.write_text(f'[approvals.queue]\nqueue = "q-{{vm_name}}"\n'
                           f'connection_string_env = "C"\n{key} = "APPROVALS_KEY"\n')
    result = subprocess.run([sys.executable, "-m", "se_forwarder", "run", "--config",
                             str(config_file), "--once"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert f"approvals.queue.{key}" in line and "verify_keys_env or verify_keys_file" in line


def test_keygen_writes_a_private_pem_0600_and_a_public_line_and_prints_it(tmp_path):
    out = tmp_path / "approvals.key"
    result = CliRunner().invoke(main, ["fleet", "keygen", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    key = signing.load_private_key(out.read_bytes(), str(out))  # PKCS#8 PEM
    assert out.read_text().startswith("-----BEGIN PRIVATE KEY-----")
    public = (tmp_path / "approvals.key.pub").read_text()
    assert public == signing.public_key_line(key) + "\n"
    assert len(base64.b64decode(public.strip(), validate=True)) == 32
    assert result.stdout.strip() == public.strip()
    (verify_key,) = signing.parse_public_keys(public, "pub")
    assert signing.keyid(verify_key) == signing.keyid(key)


def test_keygen_never_overwrites_a_key(tmp_path):
    out = tmp_path / "approvals.key"
    out.write_text("precious")
    again = CliRunner().invoke(main, ["fleet", "keygen", "--out", str(out)])
    assert again.exit_code != 0 and "not overwriting" in again.output
    assert out.read_text() == "precious" and not (tmp_path / "approvals.key.pub").exists()


def test_keygen_needs_out(tmp_path):
    result = CliRunner().invoke(main, ["fleet", "keygen"])
    assert result.exit_code == 2 and "--out" in result.output


def test_fleet_approve_print_only_signs_with_an_openssl_made_key(tmp_path):
    keyfile = tmp_path / "k.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(keyfile)], check=True)
    result = CliRunner().invoke(main, [
        "fleet", "approve", "--event-id", "C7061BAC-AFDC-4513-B24B-AA5F13A16123", "--vm", "WestNO_0",
        "--key-file", str(keyfile), "--expires-in", "90s", "--reason", "drain done", "--print-only",
    ])
    assert result.exit_code == 0, result.output
    message = json.loads(result.stdout)
    key = signing.load_private_key(keyfile.read_bytes(), "k")
    assert signing.verify(message, [key.public_key()])
    assert message["keyid"] == signing.keyid(key)
    assert message["type"] == "com.azure.scheduledevents.approve"
    assert message["data"]["VmName"] == "WestNO_0" and message["data"]["Reason"] == "drain done"


@pytest.mark.parametrize("queue, bound", [
    ("se-approvals-web-01", "web-01"),
    ("se-approvals-westno-0-cvpcqimwz357g", None),  # hashed: the VM name cannot be read back
])
def test_fleet_approve_to_a_queue_binds_the_message_to_its_vm_when_the_name_tells(queue, bound):
    result = CliRunner().invoke(main, [
        "fleet", "approve", "--event-id", "E-1", "--queue", queue, "--print-only"],
        env={"APPROVALS_KEY": KEY_PEM})
    assert result.exit_code == 0, result.output
    message = json.loads(result.stdout)
    assert message["data"].get("VmName") == bound
    if bound:
        assert f"bound to VM {bound}" in result.stderr
    else:
        assert "unbound" in result.stderr and "--vm" in result.stderr


@pytest.mark.parametrize("args, env, problem", [
    (["--vm", "a", "--queue", "b"], {"APPROVALS_KEY": KEY_PEM}, "exactly one of --vm"),
    (["--vm", "a"], {}, "environment variable APPROVALS_KEY"),
    (["--vm", "a"], {"APPROVALS_KEY": PUBLIC_LINE}, "not a PEM private key"),
    (["--vm", "a", "--expires-in", "3d"], {"APPROVALS_KEY": KEY_PEM}, "at most 24h"),
    (["--vm", "a", "--expires-in", "soon"], {"APPROVALS_KEY": KEY_PEM}, "not a duration"),
    (["--vm", "a"], {"APPROVALS_KEY": KEY_PEM}, "no queue to send to"),
    (["--queue", "Bad_Name"], {"APPROVALS_KEY": KEY_PEM}, "not a valid queue name"),
])
def test_fleet_approve_errors_are_one_line_and_non_zero(args, env, problem):
    result = CliRunner().invoke(main, ["fleet", "approve", "--event-id", "E-1", *args],
                                env={"APPROVALS_KEY": "", "APPROVALS_CONN": "",
                                     "APPROVALS_ACCOUNT_URL": "", **env})
    assert result.exit_code != 0
    assert problem in result.output
    assert "Traceback" not in result.output
    assert "PRIVATE KEY" not in result.output and PUBLIC_LINE not in result.output


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
