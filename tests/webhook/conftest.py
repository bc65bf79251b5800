"""Fixtures for the webhook sink: real receivers on 127.0.0.1, a test CA, a real outbox."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.receiver import Receiver, TlsFiles, make_tls
from tests.support.sinks import new_secret


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def secret() -> str:
    return new_secret()


@pytest.fixture
def receiver(secret: str) -> Iterator[Receiver]:
    with Receiver(secrets=[secret]) as r:
        yield r


@pytest.fixture
def tls_receiver(tls: TlsFiles, secret: str) -> Iterator[Receiver]:
    with Receiver(tls=tls, secrets=[secret]) as r:
        yield r


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def secret_env(secret: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("TEST_HOOK_SECRET", secret)
    return "TEST_HOOK_SECRET"
