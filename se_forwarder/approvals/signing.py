"""Signing and verifying approval messages (coordinator -> VM) with Ed25519, and loading the keys.

An approval message is a structured-mode CloudEvent (JSON object) with two extension attributes,
``keyid`` and ``signature``::

    keyid     = first 16 hex characters (lowercase) of SHA-256(raw 32-byte Ed25519 public key)
    canonical = json.dumps({every top-level member except "signature"},      # keyid included
                           sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                           allow_nan=False).encode("ascii")
    signature = base64(Ed25519-sign(private key, canonical))   # 64 bytes; standard alphabet, padded

``sort_keys`` applies at every depth (``data`` too), so the canonical form does not depend on
member order or whitespace. Only strings are used as values by this project; another implementation
must produce exactly these bytes (for strings: JSON escapes, non-ASCII as ``\\uXXXX``).

Only the coordinator holds a private key (PKCS#8 PEM: ``se-forwarder fleet keygen``, or
``openssl genpkey -algorithm ed25519``). Agents hold public keys, so no VM can sign: a public key
is one line of base64 of the raw 32 bytes (``FILE.pub`` of keygen), or a PEM SubjectPublicKeyInfo
block (``openssl pkey -pubout``). Several may be configured at once (rotation): an environment
variable holds them separated by commas or whitespace, a file one per line (``#`` starts a comment).
A message names its key by ``keyid``; it verifies only under the configured key with that id.

This module is the whole signing API: ``load_private_key`` / ``sign`` for a sender (``fleet
approve``, the coordinator), ``VerifyKeys`` / ``verify`` for the agent.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..errors import ConfigError
from ..timestamps import rfc3339

APPROVE_TYPE = "com.azure.scheduledevents.approve"
SIGNATURE_ATTRIBUTE = "signature"
KEYID_ATTRIBUTE = "keyid"
PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64
KEYID = re.compile(r"^[0-9a-f]{16}\Z")
_PEM_PUBLIC = re.compile(r"-----BEGIN PUBLIC KEY-----.*?-----END PUBLIC KEY-----", re.S)
MAKE_ONE = "make one with 'se-forwarder fleet keygen --out FILE'"


# -- keys ----------------------------------------------------------------------------------------


def generate_private_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def private_key_pem(key: Ed25519PrivateKey) -> bytes:
    """``key`` as unencrypted PKCS#8 PEM (what ``openssl genpkey -algorithm ed25519`` writes)."""
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def raw_public(key: Ed25519PublicKey | Ed25519PrivateKey) -> bytes:
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def public_key_line(key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """The public key as agents take it: base64 of the raw 32 bytes."""
    return base64.b64encode(raw_public(key)).decode("ascii")


def keyid(key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """First 16 hex characters of SHA-256 of the raw 32-byte public key."""
    return raw_keyid(raw_public(key))


def raw_keyid(raw: bytes) -> str:
    """``keyid`` of a raw 32-byte public key."""
    return hashlib.sha256(raw).hexdigest()[:16]


def load_private_key(pem: str | bytes, where: str) -> Ed25519PrivateKey:
    """An Ed25519 private key from PKCS#8 PEM text; ConfigError naming ``where`` (never the key)."""
    data = pem.encode("utf-8") if isinstance(pem, str) else pem
    if b"-----BEGIN" not in data:
        raise ConfigError(f"{where}: not a PEM private key ({MAKE_ONE}; shared HMAC keys are no "
                          "longer used)")
    if b"ENCRYPTED" in data:
        raise ConfigError(f"{where}: the private key is encrypted; give it unencrypted (PKCS#8, "
                          "file mode 0600) or from a secret store through an environment variable")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise ConfigError(f"{where}: not a readable PKCS#8 PEM private key ({MAKE_ONE})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"{where}: the private key is not Ed25519 ({MAKE_ONE}, or "
                          "'openssl genpkey -algorithm ed25519')")
    return key


def load_signing_key(env_name: str | None = None, file: str | Path | None = None,
                     environ: Mapping[str, str] | None = None) -> Ed25519PrivateKey:
    """The sender's private key: from ``file`` if given, else from the variable ``env_name``."""
    environ = os.environ if environ is None else environ
    if file:
        try:
            data = Path(file).read_bytes()
        except OSError as exc:
            raise ConfigError(f"private key file {file} cannot be read: "
                              f"{exc.strerror or exc}") from None
        return load_private_key(data, f"private key file {file}")
    value = environ.get(env_name or "")
    if not env_name or value is None or not value.strip():
        raise ConfigError(f"environment variable {env_name} (the PEM private key) is not set; "
                          f"give --key-file ({MAKE_ONE})")
    return load_private_key(value, f"environment variable {env_name}")


def _public_from_der_or_raw(raw: bytes, where: str, n: int) -> Ed25519PublicKey:
    if len(raw) == PUBLIC_KEY_BYTES:
        return Ed25519PublicKey.from_public_bytes(raw)
    try:
        key = serialization.load_der_public_key(raw)  # base64 of a DER SubjectPublicKeyInfo
    except (ValueError, UnsupportedAlgorithm):
        raise ConfigError(f"{where}: key #{n} is {len(raw)} bytes; an Ed25519 public key is "
                          f"base64 of {PUBLIC_KEY_BYTES} bytes (the .pub file of keygen)") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigError(f"{where}: key #{n} is not an Ed25519 public key")
    return key


def parse_public_keys(text: str, where: str) -> list[Ed25519PublicKey]:
    """Public keys from ``text``: base64 raw keys (comma/whitespace separated, ``#`` comments)
    and PEM ``PUBLIC KEY`` blocks; ConfigError naming ``where`` and the key's position."""
    if "PRIVATE KEY" in text:
        raise ConfigError(f"{where}: holds a PRIVATE key; agents take only public keys (the .pub "
                          "file of 'se-forwarder fleet keygen'); the private key stays with the "
                          "coordinator")
    keys: list[Ed25519PublicKey] = []
    n = 0
    for block in _PEM_PUBLIC.findall(text):
        n += 1
        try:
            key = serialization.load_pem_public_key(block.encode("ascii", "replace"))
        except (ValueError, UnsupportedAlgorithm):
            raise ConfigError(f"{where}: PEM key #{n} cannot be read") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ConfigError(f"{where}: PEM key #{n} is not an Ed25519 public key")
        keys.append(key)
    rest = _PEM_PUBLIC.sub(" ", text)
    for line in rest.splitlines():
        line = line.split("#", 1)[0]
        for token in line.replace(",", " ").split():
            n += 1
            try:
                raw = base64.b64decode(token, validate=True)
            except (binascii.Error, ValueError):
                raise ConfigError(f"{where}: key #{n} is not base64") from None
            keys.append(_public_from_der_or_raw(raw, where, n))
    if not keys:
        raise ConfigError(f"{where}: no public key in it (the .pub file of 'se-forwarder fleet "
                          "keygen')")
    return keys


def load_public_keys(env_name: str | None = None, file: str | Path | None = None,
                     environ: Mapping[str, str] | None = None) -> list[Ed25519PublicKey]:
    """The verify keys named by the configuration: the file's (if given), then the variable's."""
    environ = os.environ if environ is None else environ
    keys: list[Ed25519PublicKey] = []
    if file:
        try:
            text = Path(file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
            raise ConfigError(f"verify key file {file} cannot be read: {reason}") from None
        keys.extend(parse_public_keys(text, f"verify key file {file}"))
    if env_name:
        value = environ.get(env_name)
        if value is None or not value.strip():
            if not keys:
                raise ConfigError(f"environment variable {env_name} (the coordinator's public "
                                  "key) is not set")
        else:
            keys.extend(parse_public_keys(value, f"environment variable {env_name}"))
    if not keys:
        raise ConfigError("no verify key configured (verify_keys_env or verify_keys_file)")
    return keys


class VerifyKeys:
    """The public keys an agent accepts, by ``keyid``."""

    def __init__(self, keys: Iterable[Ed25519PublicKey]) -> None:
        self.by_id: dict[str, Ed25519PublicKey] = {keyid(k): k for k in keys}

    def __len__(self) -> int:
        return len(self.by_id)

    def __contains__(self, kid: object) -> bool:
        return kid in self.by_id

    @property
    def ids(self) -> list[str]:
        return sorted(self.by_id)


# -- messages ------------------------------------------------------------------------------------


def canonical(message: Mapping[str, Any]) -> bytes:
    """The bytes that are signed: every member except ``signature``, sorted, compact, ASCII."""
    unsigned = {k: v for k, v in message.items() if k != SIGNATURE_ATTRIBUTE}
    return json.dumps(
        unsigned, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


def sign(message: Mapping[str, Any], key: Ed25519PrivateKey) -> dict[str, Any]:
    """A copy of ``message`` with ``keyid`` set for ``key`` and ``signature`` over the rest."""
    signed = {k: v for k, v in message.items() if k != SIGNATURE_ATTRIBUTE}
    signed[KEYID_ATTRIBUTE] = keyid(key)
    signed[SIGNATURE_ATTRIBUTE] = base64.b64encode(key.sign(canonical(signed))).decode("ascii")
    return signed


def problem(message: Mapping[str, Any], keys: VerifyKeys | Iterable[Ed25519PublicKey]) -> str | None:
    """Why ``message`` does not verify under ``keys`` (one line), or None when it does."""
    keys = keys if isinstance(keys, VerifyKeys) else VerifyKeys(keys)
    claimed = message.get(SIGNATURE_ATTRIBUTE)
    if claimed is None:
        return "message has no signature"
    kid = message.get(KEYID_ATTRIBUTE)
    if not isinstance(kid, str) or not KEYID.match(kid):
        return "message has no keyid (16 lowercase hex characters)"
    if kid not in keys:
        return f"keyid {kid} is not a configured verify key (configured: {', '.join(keys.ids)})"
    if not isinstance(claimed, str) or len(claimed) > 100:
        return "signature is not base64 of 64 bytes"
    try:
        raw = base64.b64decode(claimed, validate=True)
    except (binascii.Error, ValueError):
        return "signature is not base64 of 64 bytes"
    if len(raw) != SIGNATURE_BYTES:
        return "signature is not base64 of 64 bytes"
    try:
        body = canonical(message)
    except (TypeError, ValueError, RecursionError):
        return "message cannot be put in canonical form"
    try:
        keys.by_id[kid].verify(raw, body)
    except InvalidSignature:
        return f"signature does not verify with key {kid}"
    return None


def verify(message: Mapping[str, Any], keys: VerifyKeys | Iterable[Ed25519PublicKey]) -> bool:
    """True when ``message`` is signed by the configured key its ``keyid`` names."""
    return problem(message, keys) is None


def new_message(
    event_id: str,
    *,
    source: str,
    key: Ed25519PrivateKey,
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
    return sign(message, key)


def encode(message: Mapping[str, Any]) -> str:
    """The queue message text for ``message`` (compact JSON)."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)
