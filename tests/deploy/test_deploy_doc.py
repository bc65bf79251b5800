"""docs/deploy.md's commands that edit the coordinator's config, run as the page gives them (on a
copy of deploy/coordinator.toml, with made-up deployment outputs): the result is the config the
deployment describes, and ``coordinator check`` as the page runs it from a shell reads the credential
files themselves."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from .conftest import REPO

DOC = (REPO / "docs/deploy.md").read_text()
OUTPUTS = {
    "eventHubsNamespace": {"value": "sefwd-eh-abc.servicebus.windows.net"},
    "coordinatorStorage": {"value": {"accountUrl": "https://sefwdabc.blob.core.windows.net",
                                     "container": "se-coordinator"}},
    "queueEndpoint": {"value": "https://sefwdabc.queue.core.windows.net"},
    "coordinatorClientId": {"value": "0c0c0c0c-0000-4000-8000-000000000001"},
}


def block(containing: str) -> str:
    (found,) = [b for b in re.findall(r"```sh\n(.*?)```", DOC, re.S) if containing in b]
    return found


@pytest.fixture()
def config(tmp_path: Path) -> Path:
    if not shutil.which("jq"):
        pytest.skip("jq is not installed (apt-get install jq), as docs/deploy.md asks")
    path = tmp_path / "coordinator.toml"
    shutil.copy(REPO / "deploy/coordinator.toml", path)
    (tmp_path / "hub.all.json").write_text(json.dumps(OUTPUTS))
    script = (block("sudo sed -i").replace("sudo ", "")
              .replace("~/hub.all.json", str(tmp_path / "hub.all.json"))
              .replace("/etc/se-forwarder/coordinator.toml", str(path)))
    subprocess.run(["bash", "-euc", script], check=True, capture_output=True, text=True, timeout=30)
    return path


def test_the_documented_edit_fills_in_every_value_to_set_from_the_outputs(config: Path) -> None:
    settings = tomllib.loads(config.read_text())
    assert settings["eventhub"]["fully_qualified_namespace"] == OUTPUTS["eventHubsNamespace"]["value"]
    assert settings["storage"]["account_url"] == OUTPUTS["coordinatorStorage"]["value"]["accountUrl"]
    assert settings["queues"]["account_url"] == OUTPUTS["queueEndpoint"]["value"]
    assert settings["queues"]["queue"] == "se-approvals-{vm_id}"  # the queues the Bicep makes
    for section in ("eventhub", "storage", "queues"):
        assert settings[section]["client_id"] == OUTPUTS["coordinatorClientId"]["value"], section
    assert settings["eventhub"]["consumer_group"] == "coordinator"  # the group the Bicep makes


def test_the_documented_check_from_a_shell_reads_the_credential_files(config: Path, tmp_path: Path
                                                                      ) -> None:
    """The page's ``coordinator check`` with ``--key-file`` and ``--token-file``, run on the edited
    config with the credential files in a temporary directory: both are read from there (the
    Azure parts fail here, each in one line, as nothing of Azure runs)."""
    from se_forwarder.approvals import signing

    credentials = tmp_path / "credentials"
    credentials.mkdir(mode=0o700)
    (credentials / "signing.key").write_bytes(signing.private_key_pem(signing.generate_private_key()))
    (credentials / "api.token").write_text("operator a-token-of-enough-length-0123456789\n")
    for secret in credentials.iterdir():
        secret.chmod(0o600)
    command = (block("coordinator check").replace("sudo /opt/se-forwarder/venv/bin/se-forwarder",
                                                  f"{sys.executable} -m se_forwarder")
               .replace("/etc/se-forwarder/coordinator.toml", str(config))
               .replace("/etc/se-forwarder/credentials", str(credentials)))
    nowhere = "http://127.0.0.1:9"  # neither IMDS nor its identity endpoint answers here
    done = subprocess.run(["bash", "-euc", f"{command} --imds-url {nowhere}"], capture_output=True,
                          text=True, timeout=180, cwd=REPO,
                          env={**os.environ, "AZURE_POD_IDENTITY_AUTHORITY_HOST": nowhere})
    lines = done.stdout.splitlines()
    said = done.stdout + done.stderr
    assert lines[1].startswith(f"ok    signing key: {credentials}/signing.key (Ed25519"), said
    assert lines[2] == f"ok    api token: {credentials}/api.token (1 token(s): operator)"
    assert done.stderr == "" and all("\n" not in x for x in lines)
