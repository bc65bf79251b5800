"""docs/deploy.md's commands that edit the coordinator's config, run as the page gives them (on a
copy of deploy/coordinator.toml, with made-up deployment outputs): the result is the config the
deployment describes, and the copy for checking from a shell points at the credential files."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
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


def test_the_shell_copy_points_at_the_credential_files(config: Path, tmp_path: Path) -> None:
    expression = re.search(r"sed '([^']+)'", block("coordinator-shell.toml")).group(1)
    shell = subprocess.run(["sed", expression, str(config)], check=True, capture_output=True,
                           text=True).stdout
    settings = tomllib.loads(shell)
    assert settings["signing"]["key_file"] == "/etc/se-forwarder/credentials/signing.key"
    assert settings["api"]["token_file"] == "/etc/se-forwarder/credentials/api.token"
