"""An attested document's SignedData read, nothing verified: its signer's certificate and what the
signature covers, with the parts every VM's document shares read once per signer. Pure.

attestation.py verifies what this reads. ``read`` checks the SignedData's shape (the rows
``malformed``, ``no-signer-cert``, ``certificates`` and the signed attributes' part of
``bad-signature`` of attestation.py's table) and returns the signer's certificate, the signature
and the bytes it covers.

Every document signed by one certificate shares all of its SignedData but the content, the signed
attributes and the signature: the version, the digest algorithms, the certificate, the signer's
identifier and algorithms. Reading those with asn1crypto's classes was most of an honest
registration's cost, so once a document was read whole and passed, its shared parts are
remembered by their exact bytes (``SHAPES`` of them): a later document whose SignedData is made of
the same elements in the same order, with exactly those bytes, has the same certificate, algorithms
and shape by construction, and only its own parts are read (its signed attributes through
asn1crypto's classes, as in the whole read). Anything else (another certificate, another order,
a CRL, unsigned attributes, an indefinite length, a constructed signature) is read whole. A
document that is refused is never remembered.

Finding those parts is itself a walk of every element (``_walk``); a document of a signer whose
parts are remembered (without signed attributes, as Azure's; up to ``FRAMES`` signers) is instead
matched against them (``_framed``): it is taken only when it is, byte for byte, the document those
parts make around its own content and signature, so it splits exactly as the walk would split it.
"""

from __future__ import annotations

import base64
import binascii
import functools
from dataclasses import dataclass
from typing import Any, NamedTuple

from cryptography import x509
from cryptography.hazmat.primitives import hashes

from ....identity.attested import MAX_SIGNATURE_CHARS, Unpacked
from ....identity.attested import unpack as unpack_whole
from .canonical import read as read_json
from .der import INTEGER_BYTE, OCTETS_BYTE, SEQUENCE_BYTE, SET_BYTE, ZERO_BYTE, elements, encoded, header_at

HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "2.16.840.1.101.3.4.2.1": hashes.SHA256, "2.16.840.1.101.3.4.2.2": hashes.SHA384,
    "2.16.840.1.101.3.4.2.3": hashes.SHA512,
    # Azure names the digest algorithm by sha256WithRSAEncryption's identifier.
    "1.2.840.113549.1.1.11": hashes.SHA256, "1.2.840.113549.1.1.12": hashes.SHA384,
    "1.2.840.113549.1.1.13": hashes.SHA512,
}
SHAPES = 256  # signers' shared parts remembered (a region has a few)


@dataclass(frozen=True)
class Refusal:
    """Why a document was refused: ``reason`` (one of attestation.REASONS) and one line of detail."""

    reason: str
    detail: str


class Refused(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.refusal = Refusal(reason, detail[:300])


@dataclass(frozen=True)
class Signed:
    """A SignedData read, nothing verified: its signer's certificate and what the signature covers."""

    cert: x509.Certificate
    cert_der: bytes
    algorithm: str
    hash_type: type[hashes.HashAlgorithm]
    signature: bytes
    message: bytes


_SHAPES: dict[tuple[bytes, ...], Signed] = {}  # a signer's shared parts -> its first document read
_SIGNED_DATA = bytes.fromhex("06092a864886f70d010702")  # the OID's element: 1.2.840.113549.1.7.2
_DATA = bytes.fromhex("06092a864886f70d010701")  # 1.2.840.113549.1.7.1


def unpack(document: Any) -> Unpacked:
    """identity/attested.unpack, its content read from the encapsulated element's bytes when the
    SignedData has the usual shape (``_split``); through asn1crypto's classes otherwise, and
    whenever anything is amiss (so every refusal is unpack's own)."""
    text = document.get("signature") if isinstance(document, dict) and document.get("encoding") == "pkcs7" \
        else None
    if not isinstance(text, str) or not text or len(text) > MAX_SIGNATURE_CHARS:
        return unpack_whole(document)
    try:
        der = binascii.a2b_base64(text, strict_mode=True)  # b64decode(validate=True) without its
        # wrapper; Azure's has no line breaks
    except (binascii.Error, ValueError):
        try:
            der = base64.b64decode("".join(text.split()), validate=True)
        except (binascii.Error, ValueError):
            return unpack_whole(document)
    content = _content(der)
    try:
        claims = read_json(content)[0] if content is not None else None
    except (ValueError, UnicodeDecodeError):
        claims = None
    if not isinstance(claims, dict) or content is None:
        return unpack_whole(document)
    return Unpacked(der, content, claims)


def _content(der: bytes) -> bytes | None:
    """The encapsulated content of a SignedData of the usual shape, an OCTET STRING of a definite
    length in an element of type data; None otherwise."""
    split = _split(der)
    if split is None:
        return None
    return split.content if split.content is not None else _encapsulated(split.encap)


def _encapsulated(data: bytes) -> bytes | None:
    """The content in the encapsulated content's element's contents ``data`` (``_content``)."""
    try:
        encap = elements(data, 0, len(data))
        if len(encap) != 2 or data[encap[0][1]:encap[0][3]] != _DATA or encap[1][0] != ZERO_BYTE:
            return None
        inner = elements(data, encap[1][2], encap[1][3])
    except ValueError:
        return None
    if len(inner) != 1 or inner[0][0] != OCTETS_BYTE:
        return None
    return data[inner[0][2]:inner[0][3]]


def read(unpacked: Unpacked) -> Signed:
    """The SignedData's shape checked and its parts read (module docstring); Refused otherwise."""
    split = _split(unpacked.der)
    shape = _SHAPES.get(split.shared) if split is not None else None
    if shape is None or split is None:
        found = _read_whole(unpacked)
        if split is not None:
            if len(_SHAPES) >= SHAPES:
                _SHAPES.clear()
            _SHAPES[split.shared] = found
        return found
    message = unpacked.content
    if split.attrs is not None:
        try:
            from asn1crypto import cms

            signed_attrs = cms.CMSAttributes.load(b"\x31" + split.attrs[1:], strict=True)
            attrs = {a["type"].native: a["values"] for a in signed_attrs} if signed_attrs.native else None
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
            raise Refused("malformed", f"the SignedData cannot be read ({exc})") from None
        if attrs is None:  # an empty set of signed attributes: as the whole read takes it
            return _read_whole(unpacked)
        message = _covered(unpacked.content, shape.hash_type, signed_attrs, attrs)
    return Signed(shape.cert, shape.cert_der, shape.algorithm, shape.hash_type, split.signature, message)


class _Split(NamedTuple):
    shared: tuple[bytes, ...]  # the parts every document of one signer shares, as their bytes
    attrs: bytes | None  # the signed attributes' [0] element
    signature: bytes
    encap: bytes  # the encapsulated content's element's contents
    content: bytes | None = None  # the content, when found (``_framed``)


@functools.lru_cache(maxsize=8)  # a document is split for its content, then for its signature
def _split(der: bytes) -> _Split | None:
    """The SignedData's parts (``_Split``); None when it is not made of exactly the elements a
    document of the usual shape has (a ContentInfo of type signedData whose SignedData holds a
    version, digest algorithms, the content, certificates and one signer), each of a definite
    length. Walked by offsets (edge/der.py): only the parts it returns are copied; a document of
    a signer whose parts are remembered is matched against them instead (``_framed``), its frame
    found by the bytes before its signature (its signer's identifier and algorithms)."""
    size = len(der)
    for signs, tail in _ENDS:
        frame = _FRAMES.get(der[size - signs - tail:size - signs])
        known = _framed(der, frame) if frame is not None else None
        if known is not None:
            return known
    split = _walk(der)
    if split is not None and split.attrs is None and split.shared in _SHAPES:
        frame = _Frame.of(split)
        if len(_FRAMES) >= FRAMES:
            _FRAMES.clear()
            _ENDS.clear()
        _FRAMES[frame.tail] = frame
        if (frame.signature_length, len(frame.tail)) not in _ENDS:
            _ENDS.append((frame.signature_length, len(frame.tail)))
    return split


class _Frame(NamedTuple):
    """A remembered signer's parts (no signed attributes), as the bytes around a document's own
    content and signature (``_framed``)."""

    split: _Split  # shared parts: (version, digest algorithms, certificates, the signer's version,
    # identifier, digest algorithm, signature algorithm, b"")
    head: bytes  # the version and digest algorithms, as they follow the SignedData's header
    signature_length: int
    between: bytes  # what follows the content up to the signature: the certificates, the signer
    tail: bytes  # the end of ``between``: the signer's identifier and algorithms, the signature's header
    layouts: dict[int, _Layout]  # by a document's length

    @staticmethod
    def of(split: _Split) -> _Frame:
        size = len(split.signature)
        signature = encoded(OCTETS_BYTE, split.signature)
        infos = encoded(SET_BYTE, encoded(SEQUENCE_BYTE, b"".join(split.shared[3:7]) + signature))
        tail = b"".join(split.shared[4:7]) + signature[:len(signature) - size]
        return _Frame(split, split.shared[0] + split.shared[1], size,
                      split.shared[2] + infos[:len(infos) - size], tail, {})


class _Layout(NamedTuple):
    """Where a document of one length made of a frame's parts has its own parts."""

    before: bytes  # its bytes before the content
    encap: int  # where the encapsulated content's element's contents begin
    content: int  # where the content begins
    ends: int  # where it ends


_FRAMES: dict[bytes, _Frame] = {}  # by their tails: the signers whose parts are remembered
_ENDS: list[tuple[int, int]] = []  # the frames' (signature length, tail length), each once
FRAMES = 16  # signers' frames remembered (another signer's frame with the same tail displaces one)
LAYOUTS = 256  # a frame's layouts remembered (one per length of content: a region has a few)


def _framed(der: bytes, frame: _Frame) -> _Split | None:
    """``_walk(der)`` for a document made of ``frame``'s parts around its own content and signature,
    each element of a definite length in its shortest form; None otherwise (``_walk`` reads it).

    Such a document is known by its length: its bytes but the content and the signature are those
    of the first document of that length that was found, by its headers, to equal byte for byte
    the one its content, signature and ``frame``'s parts make."""
    size = len(der)
    layout = frame.layouts.get(size)
    if layout is None:
        layout = _layout(der, frame)
        if layout is None:
            return None
        if len(frame.layouts) >= LAYOUTS:
            frame.layouts.clear()
        frame.layouts[size] = layout
    signs = size - frame.signature_length
    if not der.startswith(layout.before) or der[layout.ends:signs] != frame.between:
        return None
    return _Split(frame.split.shared, None, der[signs:], der[layout.encap:layout.ends],
                  der[layout.content:layout.ends])


def _layout(der: bytes, frame: _Frame) -> _Layout | None:
    """``_framed``'s layout of documents of ``der``'s length, from ``der`` (None: not made of
    ``frame``'s parts)."""
    try:
        _, at, _ = header_at(der, 0)  # the ContentInfo, its OID (checked below), [0], the SignedData
        _, at, _ = header_at(der, at + len(_SIGNED_DATA))
        _, at, _ = header_at(der, at)
        at += len(frame.head)
        _, at, _ = header_at(der, at)  # the encapsulated content's SEQUENCE, its OID, [0], OCTET STRING
        _, at, _ = header_at(der, at + len(_DATA))
        _, at, stop = header_at(der, at)
    except ValueError:
        return None
    content, signature = der[at:stop], der[len(der) - frame.signature_length:]
    _, _, certificates, *signer, _ = frame.split.shared
    inner = encoded(0xA0, encoded(OCTETS_BYTE, content))
    info = encoded(SEQUENCE_BYTE, b"".join(signer) + encoded(OCTETS_BYTE, signature))
    body = frame.head + encoded(SEQUENCE_BYTE, _DATA + inner) + certificates + encoded(SET_BYTE, info)
    if der != encoded(SEQUENCE_BYTE, _SIGNED_DATA + encoded(0xA0, encoded(SEQUENCE_BYTE, body))):
        return None
    return _Layout(der[:at], at - (len(inner) - len(content)) - len(_DATA), at, stop)


def _walk(der: bytes) -> _Split | None:
    """``_split`` by walking every element."""
    try:
        first, start, stop = header_at(der, 0)
        if first != SEQUENCE_BYTE or stop != len(der):
            return None
        outer = elements(der, start, stop)
        if len(outer) != 2 or der[outer[0][1]:outer[0][3]] != _SIGNED_DATA or outer[1][0] != ZERO_BYTE:
            return None
        wrapped = elements(der, outer[1][2], outer[1][3])
        if len(wrapped) != 1 or wrapped[0][0] != SEQUENCE_BYTE:
            return None
        parts = elements(der, wrapped[0][2], wrapped[0][3])
        if [p[0] for p in parts] != _PARTS:
            return None
        infos = elements(der, parts[4][2], parts[4][3])
        if len(infos) != 1 or infos[0][0] != SEQUENCE_BYTE:
            return None
        info = elements(der, infos[0][2], infos[0][3])
    except ValueError:
        return None
    kinds = [p[0] for p in info]
    if len(info) not in (5, 6) or kinds[0] != INTEGER_BYTE or kinds[1] not in (SEQUENCE_BYTE, 0x80) \
            or kinds[2] != SEQUENCE_BYTE or kinds[-2] != SEQUENCE_BYTE or kinds[-1] != OCTETS_BYTE \
            or (len(info) == 6 and kinds[3] != ZERO_BYTE):
        return None
    shared = [der[p[1]:p[3]] for p in (parts[0], parts[1], parts[3], info[0], info[1], info[2], info[-2])]
    attrs = der[info[3][1]:info[3][3]] if len(info) == 6 else None
    return _Split((*shared, b"\x01" if attrs is not None else b""), attrs, der[info[-1][2]:info[-1][3]],
                  der[parts[2][2]:parts[2][3]])


_PARTS = [INTEGER_BYTE, SET_BYTE, SEQUENCE_BYTE, ZERO_BYTE, SET_BYTE]


def _covered(content: bytes, hash_type: type[hashes.HashAlgorithm], signed_attrs: Any,
             attrs: dict[str, Any]) -> bytes:
    hasher = hashes.Hash(hash_type())
    hasher.update(content)
    if [v.native for v in attrs.get("message_digest", [])] != [hasher.finalize()]:
        raise Refused("bad-signature", "messageDigest is not the content's digest")
    if [v.native for v in attrs.get("content_type", [])] != ["data"]:
        raise Refused("bad-signature", "the signed contentType is not data")
    return b"\x31" + signed_attrs.dump()[1:]  # signed as a SET OF, not as [0]


def _read_whole(unpacked: Unpacked) -> Signed:
    """``read`` with asn1crypto's classes, every part."""
    from asn1crypto import cms, core

    try:
        info_of = unpacked.parsed if unpacked.parsed is not None else cms.ContentInfo.load(unpacked.der,
                                                                                             strict=True)
        signed = info_of["content"]
        infos = signed["signer_infos"]
        if len(infos) != 1:
            raise Refused("malformed", f"{len(infos)} signers; an attested document has one")
        info = infos[0]
        digest_oid = info["digest_algorithm"]["algorithm"].dotted
        listed = [a["algorithm"].dotted for a in signed["digest_algorithms"]]
        sid = info["sid"]
        version = signed["version"].native
        certificates = signed["certificates"]
        carried = [] if isinstance(certificates, core.Void) else list(certificates)
        if (version, sid.name) not in (("v1", "issuer_and_serial_number"),
                                       ("v3", "subject_key_identifier")):
            raise Refused("malformed", f"SignedData {version} with a {sid.name} signer")
        if listed != [digest_oid] or signed["crls"].native or info["unsigned_attrs"].native:
            raise Refused("malformed", "digest algorithms, CRLs or unsigned attributes out of place")
        if info["version"].native != version or not all(
                a["parameters"].dump() in (b"", b"\x05\x00") for a in (
                    *signed["digest_algorithms"], info["digest_algorithm"], info["signature_algorithm"])):
            raise Refused("malformed", "a signer version or algorithm parameters out of place")
        certs = [c.chosen for c in carried if c.name == "certificate"]
        cert = next((c for c in certs if _names(c, sid)), None)
        if cert is None:
            raise Refused("no-signer-cert", "the SignedData lacks the signer's certificate")
        if len(carried) != 1:
            raise Refused("certificates", f"the SignedData carries {len(carried)} certificates; Azure's "
                           "carries the signing certificate alone")
        if cert["signature_value"].contents[:1] != b"\x00":
            raise Refused("malformed", "the signer's certificate has a padded signature")
        signed_attrs = info["signed_attrs"]
        attrs = {a["type"].native: a["values"] for a in signed_attrs} if signed_attrs.native else None
        signature = info["signature"].native
        algorithm = info["signature_algorithm"]["algorithm"].dotted
        der = cert.dump()
        chosen = _certificate(der)
    except Refused:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        raise Refused("malformed", f"the SignedData cannot be read ({exc})") from None
    hash_type = HASHES.get(digest_oid)
    if hash_type is None:
        raise Refused("bad-signature", f"unsupported digest algorithm {digest_oid}")
    message = unpacked.content if attrs is None else \
        _covered(unpacked.content, hash_type, signed_attrs, attrs)
    return Signed(chosen, der, algorithm, hash_type, signature, message)


_LOADED: dict[bytes, x509.Certificate] = {}  # signing certificates by DER: the same few sign everything
_LOADED_MAX = 256


def _certificate(der: bytes) -> x509.Certificate:
    found = _LOADED.get(der)
    if found is None:
        found = x509.load_der_x509_certificate(der)
        if len(_LOADED) >= _LOADED_MAX:
            _LOADED.clear()
        _LOADED[der] = found
    return found


def _names(cert: Any, sid: Any) -> bool:
    """Whether the asn1crypto certificate ``cert`` is the one the signer identifier names."""
    if sid.name == "issuer_and_serial_number":  # the encoded names compared: a signer copies its
        # certificate's issuer (asn1crypto's own comparison prepares each string, about 3 ms)
        return bool(cert["tbs_certificate"]["issuer"].dump() == sid.chosen["issuer"].dump()
                    and cert.serial_number == sid.chosen["serial_number"].native)
    return bool(cert.key_identifier == sid.chosen.native)
