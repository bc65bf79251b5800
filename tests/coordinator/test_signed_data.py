"""An attested document's SignedData read by its signer's shared parts gives exactly what the whole
read gives (edge/signed_data.py): once a signer's document passed, later documents of that signer
are read only in their own parts, and no change to one of them reads differently or verifies."""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator.config.anchors import anchors
from se_forwarder.fleet.coordinator.edge import attestation, der, signed_data
from se_forwarder.fleet.coordinator.edge.chains import Chains
from se_forwarder.identity.attested import nonce_for
from se_forwarder.identity.attested import unpack as unpack_whole
from se_forwarder.simulator.attestation import AttestationAuthority
from se_forwarder.simulator.wire import compute_metadata

KEY = bytes(range(32))
NONCE = nonce_for(KEY)
VM = compute_metadata("web-1", 0)


@pytest.fixture(scope="module")
def azure() -> AttestationAuthority:
    return AttestationAuthority()


@pytest.fixture(scope="module")
def chains(azure) -> Chains:
    return Chains(anchors([azure.ca_file], [azure.intermediate_file]))


def _whole(document: dict, chains: Chains) -> attestation.Attested | attestation.Refusal:
    """attestation.verify as it was before signers' parts were remembered: asn1crypto's classes only."""
    split, unpack = signed_data._split, signed_data.unpack
    signed_data._split = lambda _der: None  # type: ignore[assignment]
    signed_data.unpack = unpack_whole  # type: ignore[assignment]
    try:
        return _verify(document, chains)
    finally:
        signed_data._split, signed_data.unpack = split, unpack  # type: ignore[assignment]


def _verify(document: dict, chains: Chains) -> attestation.Attested | attestation.Refusal:
    return attestation.verify(document, anchors=chains.anchors, nonce=NONCE, now=datetime.now(UTC),
                              chains=chains)


def _document(der: bytes) -> dict:
    return {"encoding": "pkcs7", "signature": base64.b64encode(der).decode()}


def test_a_signers_later_documents_are_read_as_the_whole_read_reads_them(azure, chains):
    first = azure.document(VM, NONCE)
    assert isinstance(_verify(first, chains), attestation.Attested)  # the signer's parts remembered
    for n in range(5):
        document = azure.document(compute_metadata(f"web-{n}", n), NONCE)
        fast = signed_data.read(signed_data.unpack(document))
        whole = signed_data._read_whole(unpack_whole(document))
        assert signed_data._split(unpack_whole(document).der) is not None
        assert (fast.cert_der, fast.algorithm, fast.hash_type, fast.signature, fast.message) == \
            (whole.cert_der, whole.algorithm, whole.hash_type, whole.signature, whole.message)


def test_another_signers_document_is_read_whole_first(chains):
    other = AttestationAuthority()  # its certificate is not one whose parts are remembered
    document = other.document(VM, NONCE)
    shared = signed_data._split(unpack_whole(document).der).shared
    signed_data._SHAPES.pop(shared, None)
    assert _verify(document, chains) == _whole(document, chains)
    assert isinstance(_verify(document, chains), attestation.Refusal)  # a CA this coordinator does not trust


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_single_byte_change_reads_otherwise_than_the_whole_read(azure, chains, data):
    document = azure.document(VM, NONCE)
    assert isinstance(_verify(document, chains), attestation.Attested)  # the signer's parts remembered
    der = bytearray(base64.b64decode(document["signature"]))
    index = data.draw(st.integers(0, len(der) - 1))
    der[index] = data.draw(st.integers(0, 255).filter(lambda b: b != der[index]))
    changed = _document(bytes(der))
    found = _verify(changed, chains)
    assert isinstance(found, attestation.Refusal)
    whole = _whole(changed, chains)
    assert isinstance(whole, attestation.Refusal) and found.reason == whole.reason


def _element(data: bytes, at: int):
    """edge/der.header_at's element as asn1crypto's parser gives it: (class, method, tag, header,
    contents, trailer), and where the next begins."""
    first, start, stop = der.header_at(data, at)
    return (first >> 6, (first >> 5) & 1, first & 31, data[at:start], data[start:stop], b""), stop


def _asn1crypto_element(data: bytes, at: int):
    from asn1crypto import parser

    element = parser.parse(data[at:])
    return element, at + len(element[3]) + len(element[4]) + len(element[5])


def _der_prefixes() -> st.SearchStrategy[bytes]:
    """Bytes that start like DER elements: a tag, a length in short or long form, then anything."""
    length = st.one_of(st.integers(0, 0x7F).map(lambda n: bytes([n])),
                       st.integers(1, 3).flatmap(lambda k: st.integers(0, min(300, 256 ** k - 1)).map(
                           lambda n: bytes([0x80 | k]) + n.to_bytes(k, "big"))),
                       st.just(b"\x80"))
    return st.builds(lambda tag, size, rest: bytes([tag]) + size + rest, st.integers(0, 255), length,
                     st.binary(max_size=320))


@settings(max_examples=500)
@given(st.one_of(_der_prefixes(), st.binary(max_size=40)))
def test_an_element_is_read_as_asn1crypto_reads_it_or_not_at_all(data):
    """edge/der.header_at: what asn1crypto's parser reads when it is of a definite length
    and a low tag number; otherwise nothing, and the document is read whole."""
    try:
        mine = _element(data, 0)
    except ValueError:
        mine = None
    try:
        theirs = _asn1crypto_element(data, 0)
    except ValueError:
        theirs = None
    if mine is not None:
        assert mine == theirs
    elif theirs is not None:
        element = theirs[0]
        assert element[2] >= 31 or element[5]  # a high tag number, an indefinite length


def test_an_honest_documents_parts_are_split_as_asn1crypto_splits_them(azure):
    der = unpack_whole(azure.document(VM, NONCE)).der
    walked, at = [], 0
    contents = _element(der, 0)[0][4]
    while at < len(contents):
        element, at = _element(contents, at)
        walked.append(element)
    reference, at = [], 0
    while at < len(contents):
        element, at = _asn1crypto_element(contents, at)
        reference.append(element)
    assert walked == reference and len(walked) == 2


def _framed_and_walked(der_bytes: bytes, azure: AttestationAuthority, chains: Chains):
    """``_split`` with the honest signer's frame in use (signed_data._framed), and the walk."""
    for _ in range(2):  # the signer's parts remembered, then met again by the walk: its frame
        assert isinstance(_verify(azure.document(_vm(), NONCE), chains), attestation.Attested)
    frame = _frame(azure)
    framed = signed_data._framed(der_bytes, frame)
    if framed is None:
        framed = signed_data._split.__wrapped__(der_bytes)  # falls back to the walk
    return framed, signed_data._walk(der_bytes)


def _vm() -> dict:
    """A new VM's metadata: its document is like no other (``_split`` remembers the last few)."""
    return compute_metadata(f"vm-{uuid.uuid4()}", 0)


def _frame(azure: AttestationAuthority):
    """The frame of ``azure``'s signer (signed_data._FRAMES)."""
    shared = signed_data._walk(unpack_whole(azure.document(VM, NONCE)).der).shared
    return next(f for f in signed_data._FRAMES.values() if f.split.shared == shared)


def _same_split(framed, walked) -> None:
    if walked is None:
        assert framed is None
        return
    assert framed is not None and framed._replace(content=None) == walked
    assert framed.content in (None, signed_data._encapsulated(walked.encap))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_changed_document_is_split_by_its_signers_frame_as_the_walk_splits_it(azure, chains, data):
    """Single bytes changed, bytes cut or put in, anywhere in an honest document: the frame takes
    it only as the walk would split it."""
    sku = data.draw(st.text("abc-", max_size=300))
    der = bytearray(unpack_whole(azure.document({**VM, "sku": sku}, NONCE)).der)
    at = data.draw(st.integers(0, len(der) - 1))
    change = data.draw(st.sampled_from(["byte", "cut", "put", "none"]))
    if change == "byte":
        der[at] = data.draw(st.integers(0, 255).filter(lambda b: b != der[at]))
    elif change == "cut":
        del der[at:at + data.draw(st.integers(1, 3))]
    elif change == "put":
        der[at:at] = data.draw(st.binary(min_size=1, max_size=3))
    _same_split(*_framed_and_walked(bytes(der), azure, chains))


def _long(first: int, contents: bytes, extra: int) -> bytes:
    """A DER element whose length is written with ``extra`` more octets than the shortest form."""
    size = len(contents)
    octets = (size.bit_length() + 7) // 8 + extra
    return bytes((first, 0x80 | octets)) + size.to_bytes(octets, "big") + contents


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(level=st.integers(0, 8), extra=st.integers(1, 2), sku=st.text("ab", max_size=200))
def test_a_length_in_a_longer_form_than_the_shortest_is_split_as_the_walk_splits_it(azure, chains, level,
                                                                                     extra, sku):
    """BER lengths the walk reads (a length in more octets than it needs) at any of the headers the
    frame rebuilds: such a document is not the frame's, and the walk reads it."""
    honest_der = unpack_whole(azure.document({**VM, "sku": sku}, NONCE)).der
    split = signed_data._walk(honest_der)
    content = signed_data._encapsulated(split.encap)
    version, digests, certificates, *signer, _ = split.shared
    levels = iter(range(9))

    def enc(first: int, contents: bytes) -> bytes:
        return _long(first, contents, extra) if next(levels) == level else der.encoded(first, contents)

    signature = enc(0x04, split.signature)
    info = enc(0x30, b"".join(signer) + signature)
    infos = enc(0x31, info)
    inner = enc(0xA0, enc(0x04, content))
    encap = enc(0x30, bytes.fromhex("06092a864886f70d010701") + inner)
    body = enc(0x30, version + digests + encap + certificates + infos)
    rebuilt = enc(0x30, bytes.fromhex("06092a864886f70d010702") + enc(0xA0, body))
    framed, walked = _framed_and_walked(rebuilt, azure, chains)
    assert walked is not None and walked.signature == split.signature
    _same_split(framed, walked)
    assert signed_data._framed(rebuilt, _frame(azure)) is None


def test_two_signers_documents_interleaved_are_each_split_by_their_own_frame(azure, chains):
    other = AttestationAuthority()
    for _ in range(2):  # each signer's parts remembered, then its frame
        for signer in (azure, other):
            _verify(signer.document(_vm(), NONCE), chains)
    for _ in range(4):
        for signer in (azure, other):
            der = unpack_whole(signer.document(_vm(), NONCE)).der
            split = signed_data._split(der)
            assert split is not None and split.content is not None  # found by a frame, not walked
            _same_split(split, signed_data._walk(der))
