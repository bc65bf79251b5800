"""Fixtures for the approval tests: Azurite (session), key pairs, agent configs with approvals.

``azurite``: the queue emulator, started once for the session on a free loopback port (skipped
with a reason only when the ``azurite-queue`` binary is missing). Tests keep apart by giving each
agent its own queue name template (``unique_queue``).
"""

from __future__ import annotations

import itertools
import json
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from se_forwarder.approvals import signing
from tests.azurite import Azurite, find_binary
from tests.conftest import read_jsonl, toml_value

_counter = itertools.count(1)


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    binary = find_binary()
    if binary is None:
        pytest.skip("azurite-queue is not installed (scripts/test installs it: "
                    "npm install --prefix .cache/azurite azurite@3.37.0)")
    with tempfile.TemporaryDirectory(prefix="azurite-") as workdir, \
            Azurite("queue", binary, Path(workdir)) as server:
        yield server


@dataclass(frozen=True)
class KeyPair:
    """The coordinator's private key (object and PEM text) and the public line agents take."""

    private: signing.Ed25519PrivateKey
    pem: str
    public: str

    @classmethod
    def new(cls) -> KeyPair:
        key = signing.generate_private_key()
        return cls(key, signing.private_key_pem(key).decode("ascii"), signing.public_key_line(key))


@pytest.fixture
def signing_key() -> KeyPair:
    return KeyPair.new()


@pytest.fixture
def unique_queue() -> str:
    """A queue name template no other test uses (``{vm_name}`` kept, as in production)."""
    return f"t{next(_counter)}-{int(time.time() * 1000) % 10**8}-{{vm_name}}"


def write_config(path: Path, *, imds_url: str, state_dir: Path, sink_path: Path,
                 poll_interval: float | None = 0.1, approvals: dict[str, Any] | None = None,
                 rules: list[dict[str, Any]] | None = None, hooks: dict[str, Any] | None = None,
                 queue: dict[str, Any] | None = None) -> Path:
    """An agent config file: the simulator as IMDS, a file sink, and the given approvals."""
    lines = ["[imds]", f"url = {toml_value(imds_url)}"]
    if poll_interval is not None:
        lines.append(f"poll_interval = {poll_interval}")
    lines += ["[state]", f"dir = {toml_value(str(state_dir))}",
              "[[sinks]]", 'type = "file"', f"path = {toml_value(str(sink_path))}",
              "[telemetry]", 'log_format = "json"', 'log_level = "debug"',
              "[approvals]"]
    for key, value in (approvals or {}).items():
        lines.append(f"{key} = {toml_value(value)}")
    for rule in rules or []:
        lines.append("[[approvals.rules]]")
        lines += [f"{k} = {toml_value(v)}" for k, v in rule.items()]
    if hooks:
        lines.append("[approvals.hooks]")
        lines += [f"{k} = {toml_value(v)}" for k, v in hooks.items()]
    if queue:
        lines.append("[approvals.queue]")
        lines += [f"{k} = {toml_value(v)}" for k, v in queue.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def cloudevents(sink_path: Path, kind: str | None = None) -> list[dict]:
    """CloudEvents written by the file sink (of type ``com.azure.scheduledevents.<kind>``)."""
    events = read_jsonl(sink_path)
    if kind is None:
        return events
    return [e for e in events if e["type"] == f"com.azure.scheduledevents.{kind}"]


def log_records(log_path: Path) -> list[dict]:
    """The agent's JSON log lines (other lines, e.g. from a crash, are skipped)."""
    out = []
    if not log_path.exists():
        return out
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
