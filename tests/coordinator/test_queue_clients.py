"""The approval queues' clients (``azure/clients.Queues``): the Storage queue SDK is found at the
service's start and imported only with the first client made."""

from __future__ import annotations

import subprocess
import sys

import pytest

from se_forwarder.errors import ConfigError
from se_forwarder.fleet.coordinator.azure import Queues
from se_forwarder.fleet.coordinator.config import Access, QueueSettings

SETTINGS = QueueSettings("https://fleet.queue.core.windows.net", "se-approvals-{vm_name}", Access())


def test_making_the_queues_does_not_import_the_storage_queue_sdk() -> None:
    code = ("import sys\n"
            "from se_forwarder.fleet.coordinator.azure import Queues\n"
            "from se_forwarder.fleet.coordinator.config import Access, QueueSettings\n"
            "Queues(QueueSettings('https://fleet.queue.core.windows.net', 'q-{vm_name}', Access()))\n"
            "print('azure.storage.queue' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_missing_storage_queue_sdk_is_named_when_the_queues_are_made(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The package cannot be uninstalled for one test: a None entry in sys.modules is how Python
    # marks a module that is not to be found.
    monkeypatch.setitem(sys.modules, "azure.storage.queue", None)
    with pytest.raises(ConfigError, match="needs azure-storage-queue"):
        Queues(SETTINGS)


def test_a_missing_azure_storage_namespace_is_named_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "azure.storage.queue", raising=False)  # imported by another test
    monkeypatch.setitem(sys.modules, "azure.storage", None)
    with pytest.raises(ConfigError, match="needs azure-storage-queue"):
        Queues(SETTINGS)
