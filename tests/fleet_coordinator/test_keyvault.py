"""The coordinator's signing key from a Key Vault secret (``[signing] key_vault_secret``), read with
its own identity through azure-keyvault-secrets.

Key Vault cannot run here, so ``Vault`` is a local HTTPS stand-in for the one operation used, Get
Secret (``GET /secrets/{name}[/{version}]?api-version=...``), answered as the REST reference
documents it: a 401 challenge naming the vault's resource, then the secret bundle (``value``,
``id``, ``attributes``) to a bearer token it knows, 403 ``Forbidden`` (``ForbiddenByRbac``) to
another, 404 ``SecretNotFound``. The token comes from the simulator's IMDS, through azure-identity's
real ``ManagedIdentityCredential``, as on a VM.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from se_forwarder.approvals import signing
from se_forwarder.errors import ConfigError
from se_forwarder.fleet.coordinator.azure.keyvault import signing_key
from se_forwarder.fleet.coordinator.config import Access
from se_forwarder.fleet.coordinator.config.service import from_dict
from se_forwarder.fleet.coordinator.config.signing import vault_secret
from se_forwarder.fleet.coordinator.signer import Signer
from se_forwarder.simulator import SimulatorServer
from se_forwarder.simulator.azure_side import AzureOptions
from se_forwarder.simulator.topology import Topology
from tests.support.azure_side import managed_identity
from tests.support.receiver import make_tls

SECRET = "coordinator-signing-key"


class Vault:
    """Key Vault's Get Secret, played on 127.0.0.1 over HTTPS (module docstring)."""

    def __init__(self, directory: Path, token: str) -> None:
        self.tls = make_tls(directory)
        self.token, self.secrets, self.requests = token, {}, []
        self.allowed = True  # False: the token's principal has no role on the vault

    def __enter__(self) -> Vault:
        vault = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                vault.requests.append((self.path, self.headers.get("Authorization", "")))
                status, body, headers = vault.answer(urlsplit(self.path).path,
                                                     self.headers.get("Authorization"))
                data = json.dumps(body).encode()
                self.send_response(status)
                for name, value in {"Content-Type": "application/json; charset=utf-8",
                                    "Content-Length": str(len(data)), **headers}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.tls.server_cert, self.tls.server_key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, path: str, authorization: str | None) -> tuple[int, dict[str, Any], dict[str, str]]:
        if not authorization:
            challenge = ('Bearer authorization="https://login.microsoftonline.com/'
                         '00000000-0000-0000-0000-000000000000", resource="https://vault.azure.net"')
            return 401, error("Unauthorized", "AKV10000: Request is missing a Bearer or PoP token."), {
                "WWW-Authenticate": challenge}
        if authorization != f"Bearer {self.token}" or not self.allowed:
            refused = error("Forbidden", "Caller is not authorized to perform action on resource. Action: "
                            "'Microsoft.KeyVault/vaults/secrets/getSecret/action'")
            refused["error"]["innererror"] = {"code": "ForbiddenByRbac"}
            return 403, refused, {}
        parts = path.strip("/").split("/")
        if len(parts) not in (2, 3) or parts[0] != "secrets" or parts[1] not in self.secrets:
            said = f"A secret with (name/id) {parts[-1]} was not found in this key vault."
            return 404, error("SecretNotFound", said), {}
        stamp = int(time.time())
        attributes = {"enabled": True, "created": stamp, "updated": stamp,
                      "recoveryLevel": "Recoverable+Purgeable", "recoverableDays": 90}
        return 200, {"value": self.secrets[parts[1]], "id": f"{self.url}/secrets/{parts[1]}/0123456789abcdef",
                     "attributes": attributes, "tags": {}}, {}


def error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


@pytest.fixture(scope="module")
def simulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimulatorServer]:
    ca = tmp_path_factory.mktemp("arm") / "ca.pem"
    with SimulatorServer(topology=Topology.build(availability_sets=[{"name": "db", "vms": 1}]),
                         azure=AzureOptions(arm_port=0, ca_path=ca)) as server:
        yield server


@pytest.fixture
def vault(simulator, tmp_path) -> Iterator[Vault]:
    assert simulator.azure is not None
    key = signing.generate_private_key()
    with Vault(tmp_path / "tls", simulator.azure.api.token) as stand_in, managed_identity(simulator):
        stand_in.secrets[SECRET] = signing.private_key_pem(key).decode()
        stand_in.key = key
        yield stand_in


def settings_with(vault: Vault, **signing_table: Any) -> Any:
    return from_dict({
        "eventhub": {"fully_qualified_namespace": "ns.servicebus.windows.net"},
        "storage": {"account_url": "https://a.blob.core.windows.net"},
        "queues": {"account_url": "https://a.queue.core.windows.net"}, "api": {"token_file": "/t"},
        "signing": {"key_vault_secret": f"{vault.url}/secrets/{SECRET}", "ca_file": str(vault.tls.ca_cert),
                    **signing_table}})


def test_the_signing_key_is_read_from_the_vault_with_the_coordinators_identity(vault, caplog):
    caplog.set_level(logging.DEBUG)
    settings = settings_with(vault)
    key = signing_key(settings.key_vault)
    assert signing.keyid(key) == signing.keyid(vault.key)
    signer = Signer(key, "urn:se-forwarder:coordinator:default")
    assert signer.key() is key and list(signer.public_keys) == [signing.keyid(key)]
    # the challenge first, then the token
    assert [auth.split(" ")[0] for _, auth in vault.requests] == ["", "Bearer"]
    assert vault.secrets[SECRET].splitlines()[1] not in caplog.text  # never logged


def test_check_reads_the_key_from_the_vault_as_the_service_will(vault):
    from se_forwarder.fleet.coordinator import check

    ok, text = check._key(settings_with(vault))
    assert ok is True and text.startswith(
        f"{vault.url}/secrets/{SECRET} (Key Vault; Ed25519, key id {signing.keyid(vault.key)}; the agents "
        "verify with its public key ")


def test_a_vault_that_refuses_the_identity_says_which_role_to_give_in_one_line(vault):
    vault.allowed = False
    with pytest.raises(ConfigError) as info:
        signing_key(settings_with(vault).key_vault)
    assert str(info.value) == ("signing.key_vault_secret: Key Vault refuses the coordinator's identity (403 "
                               "ForbiddenByRbac): give it Key Vault Secrets User on the vault")


def test_a_secret_the_vault_does_not_have_is_named(vault):
    settings = settings_with(vault, key_vault_secret=f"{vault.url}/secrets/other-key")
    with pytest.raises(ConfigError, match=r"^signing.key_vault_secret: Key Vault has no secret "
                                          r"https://127.0.0.1:\d+/secrets/other-key \(404 SecretNotFound\)$"):
        signing_key(settings.key_vault)


def test_a_secret_that_is_no_private_key_is_refused_without_showing_it(vault):
    vault.secrets[SECRET] = "not a key at all"
    with pytest.raises(ConfigError) as info:
        signing_key(settings_with(vault).key_vault)
    assert "not a PEM private key" in str(info.value) and "not a key at all" not in str(info.value)


@pytest.mark.parametrize(("table", "message"), [
    ({"key_vault_secret": "http://kv.vault.azure.net/secrets/k"}, "is not a Key Vault secret's URL"),
    ({"key_vault_secret": "https://kv.example.com/secrets/k"}, "'kv.example.com' is not a Key Vault's host"),
    ({"key_vault_secret": "https://kv.vault.azure.net/keys/k"}, "is not a Key Vault secret's URL"),
    ({"key_vault_secret": "https://kv.vault.azure.net/secrets/k", "key_file": "/k"}, "signing: give one of"),
    ({"key_file": "/k", "credential": "default"}, "signing.credential: only with key_vault_secret"),
    ({"key_vault_secret": "https://kv.vault.azure.net/secrets/k", "credential": "connection-string"},
     "signing.credential"),
])
def test_each_bad_signing_setting_is_one_line(table, message):
    base = {"eventhub": {"fully_qualified_namespace": "ns.servicebus.windows.net"},
            "storage": {"account_url": "https://a.blob.core.windows.net"},
            "queues": {"account_url": "https://a.queue.core.windows.net"}, "api": {"token_file": "/t"}}
    with pytest.raises(ConfigError) as info:
        from_dict({**base, "signing": table})
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_secret_url_may_name_a_version():
    version = "0123456789abcdef0123456789abcdef"
    secret = vault_secret(f"https://kv.vault.azure.net/secrets/signing/{version}", Access())
    assert (secret.vault_url, secret.name) == ("https://kv.vault.azure.net", "signing")
    assert secret.version == version
