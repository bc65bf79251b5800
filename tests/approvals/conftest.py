"""Fixtures for the approval tests: Azurite (session), key pairs, agent configs with approvals.

``azurite``: the queue emulator, started once for the session on a free loopback port (skipped
with a reason only when the ``azurite-queue`` binary is missing). Tests keep apart by giving each
agent its own queue name template (``unique_queue``).
"""

from __future__ import annotations

import itertools
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from se_forwarder.approvals import signing
from tests.azurite import Azurite, find_binary

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
