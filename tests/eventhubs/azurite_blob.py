"""Azurite's blob service (npm ``azurite@3.37.0``) as a subprocess on a free loopback port.

For the fleet-tail checkpoint tests: in memory only, telemetry off, API version check off.
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

ROOT = Path(__file__).resolve().parents[2]
# The storage emulator's documented, public development account (not a secret).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
LISTENING = re.compile(r"listens on http://127\.0\.0\.1:(\d+)")
INSTALL_HINT = "npm install --prefix .cache/azurite azurite@3.37.0 (scripts/test does it)"


def find_binary() -> str | None:
    """``azurite-blob`` from PATH, or from an npm install under ``.cache/azurite``."""
    found = shutil.which("azurite-blob")
    if found:
        return found
    for base in (ROOT / ".cache" / "azurite", Path("/work/.cache/azurite")):
        local = base / "node_modules" / ".bin" / "azurite-blob"
        if os.access(local, os.X_OK):
            return str(local)
    return None


class AzuriteBlob:
    """``with AzuriteBlob() as az: az.connection_string``."""

    def __init__(self, binary: str | None = None) -> None:
        self.binary = binary or find_binary()
        self.port: int | None = None
        self.proc: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str] = queue.Queue()
        self._drainer: threading.Thread | None = None

    def start(self, timeout: float = 30.0) -> AzuriteBlob:
        if not self.binary:
            raise RuntimeError(f"azurite-blob not found ({INSTALL_HINT})")
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                "0",
                "--skipApiVersionCheck",
                "--inMemoryPersistence",
                "--extentMemoryLimit",
                "64",
                "--silent",
                "--disableTelemetry",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._drainer = threading.Thread(target=self._drain, name="azurite-blob-output", daemon=True)
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
        raise RuntimeError("Azurite blob did not start: " + " | ".join(seen[-5:]))

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip())

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self._drainer is not None:
            self._drainer.join(timeout=5)

    def __enter__(self) -> AzuriteBlob:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint=http://127.0.0.1:{self.port}/{ACCOUNT};"
        )
