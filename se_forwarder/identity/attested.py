"""IMDS attested data: the nonce an agent asks for, and the parts of a document, unverified.

The request (``docs/identity.md`` cites Azure's pages)::

    GET /metadata/attested/document?api-version=2021-02-01&nonce=<32 or 10 characters>   (Metadata: true)
    -> {"encoding": "pkcs7", "signature": "<base64 DER of a CMS SignedData>"}

The SignedData's encapsulated content is the JSON document Azure signs: ``nonce``, ``vmId``,
``subscriptionId``, ``sku``, ``plan``, ``licenseType`` and ``timeStamp`` (``createdOn`` /
``expiresOn`` as ``MM/DD/YY hh:mm:ss -0000``, UTC).

The nonce binds a document to an agent's key. The REST specification (azure-rest-api-specs,
``specification/imds``: "a string of up to 32 random alphanumeric characters") allows 32
characters; Azure's page documents "a 10-digit string". The agent asks with the 32-character nonce
(``long_nonce_for``) and falls back to the 10 digits (``nonce_for``) only where IMDS refuses it
(``identity/registration.py``); the coordinator accepts either (``nonces_for``)::

    long  = hex of the first 16 bytes of SHA-256(b"se-forwarder/attested-nonce/v2\\x00" + raw key)
            (32 lowercase hex characters: 128 bits)
    short = decimal of (first 8 bytes of SHA-256(b"se-forwarder/attested-nonce/v1\\x00" + raw key),
            big-endian, unsigned) mod 10**10, 10 digits with leading zeros

Ten digits are about 33 bits: finding a second key with a given nonce takes about 2**33 key
generations (a few core-days), so a holder of Listen on the hub who reads a victim's document
could present it with a ground key; the coordinator then binds neither key
(fold/identities.py, ``conflict``). No key can be ground to a 128-bit nonce.

``unpack`` reads a document without verifying it (the agent checks that IMDS answered for its
own nonce, since IMDS may serve a cached document); ``fleet/coordinator/edge/attestation.py`` verifies.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

NONCE_CONTEXT = b"se-forwarder/attested-nonce/v1\x00"
LONG_NONCE_CONTEXT = b"se-forwarder/attested-nonce/v2\x00"
NONCE_DIGITS = 10
TIME_FORMAT = "%m/%d/%y %H:%M:%S %z"  # "11/28/18 06:16:17 -0000"
MAX_SIGNATURE_CHARS = 64 * 1024  # Azure's is about 4 kB; anything this big is not a document


class AttestedFormatError(ValueError):
    """Not an attested document: the message says which part is wrong."""


def nonce_for(public_key: bytes) -> str:
    """The 10-digit nonce of the raw 32-byte Ed25519 ``public_key``: what an agent asks IMDS for
    where IMDS refuses the 32-character one."""
    digest = hashlib.sha256(NONCE_CONTEXT + bytes(public_key)).digest()
    return str(int.from_bytes(digest[:8], "big") % 10**NONCE_DIGITS).zfill(NONCE_DIGITS)


def long_nonce_for(public_key: bytes) -> str:
    """The 32-character nonce of ``public_key`` (the REST specification's longest): what an agent
    asks IMDS for first."""
    return hashlib.sha256(LONG_NONCE_CONTEXT + bytes(public_key)).digest()[:16].hex()


def nonces_for(public_key: bytes) -> tuple[str, str]:
    """Both nonces a document for ``public_key`` may carry: (32 characters, 10 digits)."""
    return long_nonce_for(public_key), nonce_for(public_key)


#: TIME_FORMAT as Azure writes it: every field two ASCII digits (parse_time).
_TIME = re.compile(r"([0-9]{2})/([0-9]{2})/([0-9]{2}) ([0-9]{2}):([0-9]{2}):([0-9]{2}) "
                   r"([+-])([0-9]{2})([0-5][0-9])\Z")


def parse_time(value: Any) -> datetime | None:
    """A ``timeStamp`` value (``11/28/18 06:16:17 -0000``) as an aware UTC datetime, else None.

    Azure writes every field with two ASCII digits: such a value is read by its fields (``strptime``
    costs ten times as much, and a coordinator reads two per registration); any other is left to
    ``strptime``, so both read alike."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    text = value.strip()
    fields = _TIME.match(text)
    if fields is not None:
        month, day, year, hour, minute, second, sign, zone_h, zone_m = fields.groups()
        try:
            offset = (int(zone_h) * 60 + int(zone_m)) * (-60 if sign == "-" else 60)
            zone = UTC if offset == 0 else timezone(timedelta(seconds=offset))
            short = int(year)  # strptime's %y: 69-99 are the 1900s, 00-68 the 2000s
            return datetime(short + (1900 if short >= 69 else 2000), int(month), int(day), int(hour),
                            int(minute), int(second), tzinfo=zone).astimezone(UTC)
        except ValueError:
            pass  # strptime says what it makes of it
    try:
        return datetime.strptime(text, TIME_FORMAT).astimezone(UTC)
    except ValueError:
        return None


@dataclass(frozen=True)
class Unpacked:
    """An attested document taken apart: the SignedData's DER and the JSON it carries."""

    der: bytes
    content: bytes
    claims: dict[str, Any]
    parsed: Any = field(default=None, compare=False, repr=False)  # asn1crypto's ContentInfo, read once

    @property
    def nonce(self) -> str | None:
        value = self.claims.get("nonce")
        return value if isinstance(value, str) else None

    @property
    def vm_id(self) -> str | None:
        value = self.claims.get("vmId")
        return value if isinstance(value, str) and value else None

    def times(self) -> tuple[datetime | None, datetime | None]:
        """(``timeStamp.createdOn``, ``timeStamp.expiresOn``); None where absent or unreadable."""
        stamp = self.claims.get("timeStamp")
        if not isinstance(stamp, Mapping):
            return None, None
        return parse_time(stamp.get("createdOn")), parse_time(stamp.get("expiresOn"))


def unpack(document: Any) -> Unpacked:
    """The SignedData and its JSON content of an IMDS answer; AttestedFormatError naming the part
    that is wrong. Nothing is verified here."""
    from asn1crypto import cms  # only where attested documents are read

    if not isinstance(document, Mapping):
        raise AttestedFormatError("the attested document is not a JSON object")
    if document.get("encoding") != "pkcs7":
        raise AttestedFormatError(f"encoding is {str(document.get('encoding'))[:40]!r}, not 'pkcs7'")
    text = document.get("signature")
    if not isinstance(text, str) or not text or len(text) > MAX_SIGNATURE_CHARS:
        raise AttestedFormatError("signature is not a base64 string of a sane size")
    try:
        der = base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise AttestedFormatError("signature is not base64") from None
    try:
        info = cms.ContentInfo.load(der, strict=True)
        if info["content_type"].native != "signed_data":
            raise AttestedFormatError("signature is not a CMS SignedData")
        encap = info["content"]["encap_content_info"]
        if encap["content_type"].native != "data":
            raise AttestedFormatError("the signed content is not of type data")
        content = encap["content"].native
    except AttestedFormatError:
        raise
    except (ValueError, TypeError, KeyError) as exc:  # asn1crypto's parse errors
        raise AttestedFormatError(f"signature is not a readable CMS SignedData ({exc})"[:200]) from None
    if not isinstance(content, bytes):
        raise AttestedFormatError("the SignedData carries no content")
    try:
        claims = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        raise AttestedFormatError("the signed content is not JSON") from None
    if not isinstance(claims, dict):
        raise AttestedFormatError("the signed content is not a JSON object")
    return Unpacked(der, content, claims, info)
