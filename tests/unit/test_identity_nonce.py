"""The nonce that binds an attested document to an agent's key (``identity/attested.nonce_for``)."""

from __future__ import annotations

import re

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given
from hypothesis import strategies as st

from se_forwarder.approvals import signing
from se_forwarder.identity.attested import nonce_for, parse_time


def test_the_documented_vector_holds():
    """docs/identity.md's example: the key whose private seed is the bytes 0..31."""
    key = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    assert signing.public_key_line(key) == "A6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg="
    assert signing.keyid(key) == "56475aa75463474c"
    assert nonce_for(signing.raw_public(key)) == "5451134606"


@given(st.binary(min_size=32, max_size=32))
def test_every_nonce_is_ten_digits_which_both_azure_rules_allow(public_key):
    nonce = nonce_for(public_key)
    assert re.fullmatch(r"[0-9]{10}", nonce), "the documentation's rule: a 10-digit string"
    assert re.fullmatch(r"[A-Za-z0-9]{1,32}", nonce), "the REST specification's rule"
    assert nonce_for(public_key) == nonce


def test_azures_timestamps_read_as_utc():
    moment = parse_time("11/28/18 06:16:17 -0000")
    assert moment is not None and moment.isoformat() == "2018-11-28T06:16:17+00:00"
    assert parse_time("2018-11-28T06:16:17Z") is None
    assert parse_time(None) is None
