"""A data.Vm's fingerprint (fold/caps.fingerprint) tells apart what the fold reads differently: values
whose Python hashes collide by design (-1 and -2, 1 and 2**61) and values of other types."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator.fold.caps import fingerprint

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5))


def test_numbers_whose_hashes_collide_have_different_fingerprints():
    assert hash(-1) == hash(-2) and hash(1) == hash(2**61) == hash(2.0**61)
    fault_domains = [fingerprint({"platformFaultDomain": v}) for v in (-1, -2, 1, 2**61, 2.0**61)]
    assert len(set(fault_domains)) == 5
    assert fingerprint({"tags": {"n": -1}}) != fingerprint({"tags": {"n": -2}})


def test_a_value_keeps_its_type():
    assert len({fingerprint({"zone": v}) for v in (1, 1.0, True, "1", None)}) == 5


def test_lists_and_objects_within_objects_are_not_fingerprinted():
    assert fingerprint({"tags": ["a"]}) is None
    assert fingerprint({"tags": {"a": {"b": "c"}}}) is None
    assert fingerprint({"tags": {"a": [1]}}) is None


@given(st.dictionaries(st.text(max_size=3), SCALARS, max_size=4),
       st.dictionaries(st.text(max_size=3), SCALARS, max_size=4))
def test_equal_fingerprints_mean_equal_data_for_scalars(a, b):
    if fingerprint(a) == fingerprint(b):
        assert list(a.items()) == list(b.items()) and all(type(a[k]) is type(b[k]) for k in a)
