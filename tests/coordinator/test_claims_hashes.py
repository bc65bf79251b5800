"""Claims kept by a hash cut to 30 bits (decide/claims.py): claims whose hashes are equal by chance
are told apart by their texts, and only claims truly shared are reported shared."""

from __future__ import annotations

from se_forwarder.fleet.coordinator.decide.claims import BITS, Claims


class Colliding(str):
    """A claim whose hash is that of every other one."""

    def __hash__(self) -> int:
        return 7


def test_claims_whose_hashes_collide_are_not_shared_unless_their_texts_are_equal() -> None:
    claims, texts = Claims(), {"a": Colliding("q-one"), "b": Colliding("q-two"), "c": Colliding("q-one")}
    codes = {claims.add(key, text) for key, text in texts.items()}
    assert codes == {7} and sorted(claims.holders(7)) == ["a", "b", "c"]
    assert claims.shared(texts.get) == [("q-one", ["a", "c"])]
    claims.remove("c")
    assert claims.shared(texts.get) == []


def test_a_claim_s_hash_is_one_digit_of_an_int() -> None:
    rid = "/subscriptions/s/resourcegroups/rg/providers/microsoft.compute/virtualmachines/vm"
    code = Claims().add("a", rid)
    assert code is not None and 0 <= code <= BITS < 1 << 30
