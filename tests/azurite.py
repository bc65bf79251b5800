"""Azurite (npm ``azurite@3.37.0``) as a real subprocess on a free loopback port.

One service per process: ``queue`` for the approval-queue tests and bench, ``blob`` for the
fleet-tail checkpoint tests. In memory only, telemetry off, API version check off
(azure-storage-queue 12.18 asks for a newer version than Azurite 3.37 knows).
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.support.processes import end

ROOT = Path(__file__).resolve().parents[1]
# The storage emulator's documented, public development account (not a secret).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
LISTENING = re.compile(r"listens on http://127\.0\.0\.1:(\d+)")
INSTALL_HINT = "npm install --prefix .cache/azurite azurite@3.37.0 (scripts/test does it)"


def find_binary(service: str = "queue") -> str | None:
    """``azurite-<service>`` from PATH, or from the test script's install in ``.cache/azurite``."""
    found = shutil.which(f"azurite-{service}")
    if found:
        return found
    local = ROOT / ".cache" / "azurite" / "node_modules" / ".bin" / f"azurite-{service}"
    return str(local) if os.access(local, os.X_OK) else None


# Modules that need both Azurite services: ``pytestmark = [..., needs_blob_and_queue]``.
needs_blob_and_queue = pytest.mark.skipif(find_binary("blob") is None or find_binary("queue") is None,
                                          reason="Azurite is not installed (scripts/test installs it)")


class Azurite:
    """``with Azurite("queue") as az: az.connection_string``; ``az.client(name)`` for a queue."""

    def __init__(self, service: str = "queue", binary: str | None = None,
                 workdir: Path | None = None) -> None:
        self.service = service
        self.binary = binary or find_binary(service)
        self.workdir = workdir
        self.port: int | None = None
        self.proc: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str] = queue.Queue()
        self._drainer: threading.Thread | None = None

    def start(self, timeout: float = 90.0) -> Azurite:
        if not self.binary:
            raise RuntimeError(f"azurite-{self.service} not found ({INSTALL_HINT})")
        self.proc = subprocess.Popen(
            [self.binary, f"--{self.service}Host", "127.0.0.1", f"--{self.service}Port", "0",
             "--skipApiVersionCheck", "--inMemoryPersistence", "--extentMemoryLimit", "64",
             "--silent", "--disableTelemetry"],
            cwd=self.workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        self._drainer = threading.Thread(target=self._drain, name="azurite-output", daemon=True)
        self._drainer.start()
        deadline = time.monotonic() + timeout
        seen: list[str] = []
        while time.monotonic() < deadline:
            try:
                line = self._lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            seen.append(line)
            match = LISTENING.search(line)
            if match:
                self.port = int(match.group(1))
                return self
        self.stop()
        raise RuntimeError(f"Azurite {self.service} did not start: " + " | ".join(seen[-5:]))

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip())

    def stop(self) -> None:
        end(self.proc)
        if self._drainer is not None:
            self._drainer.join(timeout=5)

    def __enter__(self) -> Azurite:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/{ACCOUNT}"

    @property
    def queue_url(self) -> str:
        return self.endpoint

    @property
    def connection_string(self) -> str:
        kind = self.service.capitalize()
        return (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
                f"{kind}Endpoint={self.endpoint};")

    def client(self, name: str):  # -> azure.storage.queue.QueueClient
        from azure.storage.queue import QueueClient

        return QueueClient.from_connection_string(self.connection_string, name)
