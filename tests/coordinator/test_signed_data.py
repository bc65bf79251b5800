"""An attested document's SignedData read by its signer's shared parts gives exactly what the whole
read gives (edge/signed_data.py): once a signer's document passed, later documents of that signer
are read only in their own parts, and no change to one of them reads differently or verifies."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator.config.anchors import anchors
from se_forwarder.fleet.coordinator.edge import attestation, signed_data
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
    """edge/signed_data._at's element as asn1crypto's parser gives it: (class, method, tag, header,
    contents, trailer), and where the next begins."""
    first, start, stop = signed_data._at(data, at)
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
    """edge/signed_data._at: what asn1crypto's parser reads when it is of a definite length
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
