"""Signing and verifying approval messages (coordinator -> VM), and the shared keys.

An approval message is a structured-mode CloudEvent (JSON object) with an extension attribute
``signature``. The signature is computed as::

    canonical = json.dumps({every top-level member except "signature"},
                           sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                           allow_nan=False).encode("ascii")
    signature = base64(HMAC-SHA256(key, canonical))          # standard alphabet, padded

``sort_keys`` applies at every depth (``data`` too), so the canonical form does not depend on
member order or whitespace. Only strings are used as values by this project; another implementation
must produce exactly these bytes (for strings: JSON escapes, non-ASCII as ``\\uXXXX``).

Keys are base64 of at least 32 random bytes (``se-forwarder fleet keygen``). Several keys may be
configured at once (rotation): an environment variable holds them separated by commas or
whitespace, a file one per line (``#`` starts a comment). The coordinator signs with the first;
the agent accepts a signature made with any of them. Keys are never logged.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..timestamps import rfc3339

APPROVE_TYPE = "com.azure.scheduledevents.approve"
SIGNATURE_ATTRIBUTE = "signature"
MIN_KEY_BYTES = 32
KEY_BYTES = 32


def generate_key() -> str:
    """A new random signing key, as base64 text."""
    return base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode("ascii")


def parse_keys(text: str, where: str) -> list[bytes]:
    """Keys from ``text`` (comma/whitespace separated, ``#`` comments); ConfigError naming ``where``.

    The message never quotes a key: it only says which one (by position) is wrong.
    """
    tokens: list[str] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        tokens.extend(t for t in line.replace(",", " ").split() if t)
    if not tokens:
        raise ConfigError(f"{where}: no signing key in it (make one with 'se-forwarder fleet keygen')")
    keys: list[bytes] = []
    for n, token in enumerate(tokens, 1):
        try:
            key = base64.b64decode(token, validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(f"{where}: key #{n} is not base64") from None
        if len(key) < MIN_KEY_BYTES:
            raise ConfigError(
                f"{where}: key #{n} is {len(key)} bytes; at least {MIN_KEY_BYTES} random bytes are "
                "needed (make one with 'se-forwarder fleet keygen')"
            )
        keys.append(key)
    return keys


def load_keys(
    env_name: str | None = None,
    file: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[bytes]:
    """The keys named by the configuration: the file's (if given), then the variable's."""
    environ = os.environ if environ is None else environ
    keys: list[bytes] = []
    if file:
        try:
            text = Path(file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
            raise ConfigError(f"signing key file {file} cannot be read: {reason}") from None
        keys.extend(parse_keys(text, f"signing key file {file}"))
    if env_name:
        value = environ.get(env_name)
        if value is None or not value.strip():
            if not keys:
                raise ConfigError(f"environment variable {env_name} (the signing key) is not set")
        else:
            keys.extend(parse_keys(value, f"environment variable {env_name}"))
    if not keys:
        raise ConfigError("no signing key configured (signing_key_env or signing_key_file)")
    return keys


def canonical(message: Mapping[str, Any]) -> bytes:
    """The bytes that are signed: every member except ``signature``, sorted, compact, ASCII."""
    unsigned = {k: v for k, v in message.items() if k != SIGNATURE_ATTRIBUTE}
    return json.dumps(
        unsigned, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


def sign(message: Mapping[str, Any], key: bytes) -> str:
    """The base64 HMAC-SHA256 of ``message``'s canonical form."""
    return base64.b64encode(hmac.new(key, canonical(message), hashlib.sha256).digest()).decode("ascii")


def verify(message: Mapping[str, Any], keys: Iterable[bytes]) -> bool:
    """True when ``message['signature']`` is the HMAC of its canonical form under one of ``keys``.

    Compared in constant time; a signature that is not base64 of 32 bytes never verifies.
    """
    claimed = message.get(SIGNATURE_ATTRIBUTE)
    if not isinstance(claimed, str) or len(claimed) > 64:
        return False
    try:
        digest = base64.b64decode(claimed, validate=True)
    except (binascii.Error, ValueError):
        return False
    if len(digest) != hashlib.sha256().digest_size:
        return False
    try:
        body = canonical(message)
    except (TypeError, ValueError, RecursionError):
        return False
    ok = False
    for key in keys:
        # No early exit: the time taken does not depend on which key (if any) matched.
        ok |= hmac.compare_digest(hmac.new(key, body, hashlib.sha256).digest(), digest)
    return ok


def new_message(
    event_id: str,
    *,
    source: str,
    key: bytes,
    expires_at: datetime,
    reason: str = "",
    vm_name: str | None = None,
    now: datetime | None = None,
    message_id: str | None = None,
) -> dict[str, Any]:
    """A signed approval message for ``event_id`` (``vm_name`` binds it to one VM)."""
    now = now or datetime.now(UTC)
    data: dict[str, Any] = {"EventId": event_id, "ExpiresAt": rfc3339(expires_at, milliseconds=True)}
    if reason:
        data["Reason"] = reason
    if vm_name:
        data["VmName"] = vm_name
    message: dict[str, Any] = {
        "specversion": "1.0",
        "type": APPROVE_TYPE,
        "id": message_id or str(uuid.uuid4()),
        "source": source,
        "time": rfc3339(now, milliseconds=True),
        "datacontenttype": "application/json",
        "data": data,
    }
    message[SIGNATURE_ATTRIBUTE] = sign(message, key)
    return message


def encode(message: Mapping[str, Any]) -> str:
    """The queue message text for ``message`` (compact JSON)."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)
