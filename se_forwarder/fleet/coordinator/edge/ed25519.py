"""Ed25519 verification of agents' signatures, with libsodium where it is installed. Pure.

``verifier(raw)`` makes a verifier for a raw 32-byte public key once and keeps it (a coordinator
verifies each VM's reports with the same key): PyNaCl (libsodium) where it is installed, about
twice as fast here as OpenSSL through ``cryptography`` (docs/performance.md); else
``cryptography``. Both check RFC 8032 signatures over the same bytes. ``problem`` is
``signing.problem`` for one raw key (a registration's own signature), through that verifier, its
canonical form made by canonical.py.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from typing import Any

from ....approvals import signing
from .canonical import canonical

Verify = Callable[[bytes, bytes], bool]  # (signature, message) -> verified
_KEYS: dict[bytes, Verify] = {}
_KEYS_MAX = 200_000


def verifier(raw: bytes) -> Verify:
    """A verifier for the raw 32-byte Ed25519 key ``raw``, made once per key (libsodium, else OpenSSL)."""
    found = _KEYS.get(raw)
    if found is not None:
        return found
    try:
        from nacl.exceptions import BadSignatureError
        from nacl.signing import VerifyKey

        key = VerifyKey(raw)

        def verify(signature: bytes, message: bytes) -> bool:
            try:
                key.verify(message, signature)
            except (BadSignatureError, ValueError, TypeError):
                return False
            return True
    except ImportError:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        public = Ed25519PublicKey.from_public_bytes(raw)

        def verify(signature: bytes, message: bytes) -> bool:
            try:
                public.verify(signature, message)
            except InvalidSignature:
                return False
            return True
    if len(_KEYS) >= _KEYS_MAX:
        _KEYS.clear()
    _KEYS[raw] = verify
    return verify


def problem(message: Mapping[str, Any], raw: bytes, keyid: str | None = None,
            plain: bool = False) -> str | None:
    """Why ``message`` is not signed by the raw key ``raw`` (signing.problem's rules and lines), or
    None; ``keyid``: ``raw``'s key id, when known; ``plain``: canonical.read found ``message`` plain."""
    kid = message.get(signing.KEYID_ATTRIBUTE)
    claimed = message.get(signing.SIGNATURE_ATTRIBUTE)
    if kid != (keyid or signing.raw_keyid(raw)) or not isinstance(claimed, str) or len(claimed) > 100:
        return _said(message, raw)
    try:
        signature = base64.b64decode(claimed, validate=True)
        body = canonical(message, plain)
    except (binascii.Error, ValueError, TypeError, RecursionError):
        return _said(message, raw)
    if len(signature) != signing.SIGNATURE_BYTES or not verifier(raw)(signature, body):
        return _said(message, raw)
    return None


def _said(message: Mapping[str, Any], raw: bytes) -> str:
    """signing.problem's line for a message that does not verify with ``raw``."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    said = signing.problem(message, [Ed25519PublicKey.from_public_bytes(raw)])
    return said or f"signature does not verify with key {signing.raw_keyid(raw)}"
