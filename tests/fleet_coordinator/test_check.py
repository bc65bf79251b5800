"""``se-forwarder coordinator check`` does not say ok about what will fail: against the Event Hubs
broker fixture (which refuses an unknown consumer group and a link the token's claims do not cover,
with Event Hubs' own errors) and Azurite (blob and queue; a SAS without the right gives Storage's
``AuthorizationPermissionMismatch``, as a missing data role does), each problem is one line naming
what to do.

Azurite cannot play a storage account's firewall, so ``Firewall`` below is a small loopback HTTP
front that answers every request as Azure Storage answers one its network rules refuse: 403 with
``x-ms-error-code: AuthorizationFailure`` and Storage's XML error body. It stands in for that one
answer only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from se_forwarder.approvals import signing
from tests.azurite import ACCOUNT, ACCOUNT_KEY, Azurite, needs_blob_and_queue
from tests.eventhubs.broker import EventHubsBroker
from tests.support.config import toml_value
from tests.support.paths import ROOT

pytestmark = needs_blob_and_queue

FIREWALL_BODY = ('<?xml version="1.0" encoding="utf-8"?><Error><Code>AuthorizationFailure</Code><Message>'
                 'This request is not authorized to perform this operation.\nRequestId:{id}\nTime:{time}'
                 '</Message></Error>')


class Firewall:
    """A storage account's firewall, as Azure answers (module docstring), on 127.0.0.1."""

    def __enter__(self) -> Firewall:
        class Handler(BaseHTTPRequestHandler):
            def _refuse(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                body = FIREWALL_BODY.format(id=uuid.uuid4(), time=datetime.now(UTC).isoformat()).encode()
                self.send_response(403, "This request is not authorized to perform this operation.")
                headers = {"Content-Type": "application/xml", "x-ms-error-code": "AuthorizationFailure",
                           "x-ms-request-id": str(uuid.uuid4()), "Content-Length": str(len(body))}
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _refuse

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def connection_string(self, service: str) -> str:
        port = self.server.server_address[1]
        return (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
                f"{service}Endpoint=http://127.0.0.1:{port}/{ACCOUNT};")


def read_only_sas(azurite: Azurite) -> str:
    """A connection string whose SAS may read and list only: Storage answers a write with the 403 a
    missing data role gets (``AuthorizationPermissionMismatch``)."""
    if azurite.service == "blob":
        from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas
    else:
        from azure.storage.queue import AccountSasPermissions, ResourceTypes, generate_account_sas  # type: ignore

    sas = generate_account_sas(ACCOUNT, ACCOUNT_KEY, ResourceTypes(service=True, container=True, object=True),
                               AccountSasPermissions(read=True, list=True),
                               datetime.now(UTC) + timedelta(hours=1))
    return f"{azurite.service.capitalize()}Endpoint={azurite.endpoint};SharedAccessSignature={sas}"


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("check")
    broker = EventHubsBroker(consumer_groups=("coordinator",), policies={"listen": ("Listen",)})
    with broker, Azurite("blob", workdir=base) as blob, Azurite("queue", workdir=base) as queue, \
            Firewall() as wall:
        key = base / "signing.key"
        key.write_bytes(signing.private_key_pem(signing.generate_private_key()))
        key.chmod(0o600)
        token = base / "api.token"
        token.write_text("operator a-token-of-enough-length-0123456789\n")
        token.chmod(0o600)
        from azure.storage.blob import ContainerClient

        with ContainerClient.from_connection_string(blob.connection_string, "se-coordinator") as container:
            container.create_container()  # the lease's and snapshots' container, as the Bicep makes it
        yield {"base": base, "broker": broker, "blob": blob, "queue": queue, "wall": wall, "key": key,
               "token": token}


def check(parts: dict[str, Any], *, group: str = "coordinator", **env: str) -> tuple[int, list[str], str]:
    """``coordinator check`` as a shell runs it: exit code, stdout lines, stderr."""
    config = parts["base"] / f"coordinator-{uuid.uuid4().hex[:6]}.toml"
    config.write_text("\n".join([
        "[coordinator]", 'name = "prod"',
        "[eventhub]", f"consumer_group = {toml_value(group)}", 'credential = "connection-string"',
        'connection_string_env = "EH"',
        "[storage]", 'credential = "connection-string"', 'connection_string_env = "BLOB"',
        "[queues]", 'credential = "connection-string"', 'connection_string_env = "QUEUE"',
        "[signing]", f"key_file = {toml_value(str(parts['base'] / 'elsewhere.key'))}",
        "[api]", 'listen = "127.0.0.1:9"',
        f"token_file = {toml_value(str(parts['base'] / 'elsewhere.token'))}",
    ]) + "\n")
    variables = {"EH": parts["broker"].connection_string(), "BLOB": parts["blob"].connection_string,
                 "QUEUE": parts["queue"].connection_string, **env}
    command = [sys.executable, "-m", "se_forwarder", "coordinator", "check", "--config", str(config),
               "--key-file", str(parts["key"]), "--token-file", str(parts["token"]),
               "--imds-url", "http://127.0.0.1:9"]
    done = subprocess.run(command, env={**os.environ, **variables}, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    return done.returncode, done.stdout.splitlines(), done.stderr


def line(lines: list[str], part: str) -> str:
    [found] = [x for x in lines if x[6:].startswith(part + ":")]
    return found


def test_a_working_setup_is_ok_from_a_shell_with_the_key_and_token_files_given(parts):
    code, lines, stderr = check(parts)
    assert code == 0, lines
    for part in ("signing key", "api token", "event hub", "storage", "queues"):
        assert line(lines, part).startswith("ok "), lines
    assert "read in consumer group coordinator; decisions may be published (a sender link opened, nothing " \
           "sent)" in line(lines, "event hub")
    trust = line(lines, "attestation")
    assert trust.startswith("warn ") and "the chain was not tried" in trust
    assert stderr == ""


def test_a_missing_consumer_group_is_one_line(parts):
    code, lines, stderr = check(parts, group="se-coordinator")
    assert code == 1 and stderr == ""
    assert line(lines, "event hub") == (
        "FAIL  event hub: scheduled-events: 4 partition(s), but its consumer group 'se-coordinator' does not "
        "exist: create it (the Bicep makes 'coordinator') or set [eventhub] consumer_group")


def test_a_missing_send_right_is_one_line_naming_the_role(parts):
    code, lines, _ = check(parts, EH=parts["broker"].connection_string(policy="listen"))
    assert code == 1
    assert line(lines, "event hub").endswith(
        "but the identity may not send (Event Hubs: 'Send' claim required): give it Azure Event Hubs Data "
        "Sender (it publishes its decisions there)")


def test_a_storage_firewall_is_told_apart_from_a_missing_role(parts):
    code, lines, stderr = check(parts, BLOB=parts["wall"].connection_string("Blob"),
                                QUEUE=read_only_sas(parts["queue"]))
    assert code == 1 and stderr == ""
    assert line(lines, "storage") == (
        "FAIL  storage: the storage account refuses this network (403 AuthorizationFailure: its firewall or "
        "private endpoint rules): allow this VM's subnet or address, or reach it through a private endpoint")
    assert line(lines, "queues") == (
        "FAIL  queues: the identity may not do this on the approval queues (403 "
        "AuthorizationPermissionMismatch): give it Storage Queue Data Message Sender")


def test_a_queue_firewall_and_a_blob_role_are_each_one_line_too(parts):
    code, lines, _ = check(parts, BLOB=read_only_sas(parts["blob"]),
                           QUEUE=parts["wall"].connection_string("Queue"))
    assert code == 1
    assert line(lines, "storage").endswith("(403 AuthorizationPermissionMismatch): give it Storage Blob Data "
                                           "Contributor")
    assert line(lines, "queues").startswith("FAIL  queues: the storage account refuses this network (403 "
                                            "AuthorizationFailure")
    assert all("\n" not in x and len(x) < 500 for x in lines)
