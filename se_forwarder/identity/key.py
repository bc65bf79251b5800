"""The agent's Ed25519 identity key: made once in the state directory, then kept.

``identity.key`` holds the private key as unencrypted PKCS#8 PEM (what ``openssl genpkey
-algorithm ed25519`` writes), file mode 0600. The agent makes it at its first start (after taking
the state directory's lock, so two agents never race) and reads it at every later start: a restart
or an upgrade keeps the identity. A file that cannot be read, that is not an Ed25519 key, or that
other users may read stops the agent with one line saying so (``StateError``, exit 3): a new key
would make the coordinator see a new identity for this VM, which only the operator should decide,
by moving the file away.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..approvals import signing
from ..errors import StateError

KEY_FILE = "identity.key"
KEY_MODE = 0o600
NEW_IDENTITY = "move it away to make a new identity (the coordinator then sees a new key for this VM)"


@dataclass(frozen=True)
class AgentKey:
    """The loaded key, and what others know it by."""

    private: Ed25519PrivateKey
    path: Path
    created: bool  # made by this start

    @property
    def public_raw(self) -> bytes:
        return signing.raw_public(self.private)

    @property
    def public_line(self) -> str:
        """Base64 of the raw 32-byte public key."""
        return signing.public_key_line(self.private)

    @property
    def keyid(self) -> str:
        return signing.keyid(self.private)

    def sign(self, event: dict[str, Any]) -> dict[str, Any]:
        """``event`` with ``keyid`` and ``signature`` (``approvals/signing.sign``)."""
        return signing.sign(event, self.private)


def load_or_create(state_dir: Path) -> AgentKey:
    """The key of ``state_dir/identity.key``, made now if the file does not exist yet."""
    path = Path(state_dir) / KEY_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return AgentKey(_create(path), path, created=True)
    except OSError as exc:
        raise StateError(f"identity key {path} cannot be read: {exc.strerror or exc}") from None
    _check_mode(path)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        key = None
    if not isinstance(key, Ed25519PrivateKey):
        raise StateError(f"identity key {path} is not an unencrypted Ed25519 private key (PKCS#8 "
                         f"PEM); {NEW_IDENTITY}")
    return AgentKey(key, path, created=False)


def _create(path: Path) -> Ed25519PrivateKey:
    key = signing.generate_private_key()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, KEY_MODE)
        try:
            os.write(fd, signing.private_key_pem(key))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise StateError(f"cannot write identity key {path}: {exc.strerror or exc}") from None
    return key


def _check_mode(path: Path) -> None:
    if os.name == "nt":  # the state directory's ACL protects it there
        return
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise StateError(f"identity key {path} may be read by other users (mode {mode:04o}); "
                         f"'chmod 600 {path}' and start again")
