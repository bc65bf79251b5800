"""A decision's data is folded only as strict JSON of a sane size (fold/decisions.py's ``sane``):
the answer is exactly ``json.dumps``'s, whichever way it is found."""

from __future__ import annotations

import enum
import json
import math
import uuid
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator.decide import Decision, to_dict
from se_forwarder.fleet.coordinator.decide.events import BudgetUse, VmRef
from se_forwarder.fleet.coordinator.fold.decisions import MAX_DECISION_BYTES, sane


def by_json(data: Any) -> bool:
    """What the fold asked before: json.dumps without NaN, at most MAX_DECISION_BYTES long."""
    try:
        return len(json.dumps(data, allow_nan=False)) <= MAX_DECISION_BYTES
    except (ValueError, TypeError, RecursionError):
        return False


class Colour(enum.Enum):
    RED = 1


class Level(enum.IntEnum):
    LOW = 1


class Text(str):
    pass


# every character class json and orjson write differently: controls, DEL, quotes, two- to four-byte
# characters, lone surrogates (orjson refuses them, json escapes them)
characters = st.one_of(st.characters(max_codepoint=0x7F), st.characters(),
                       st.sampled_from("\x7f\"\\\ud800é€😀"))
texts = st.one_of(st.text(characters, max_size=20),
                  st.builds(lambda c, n: c * n, characters, st.integers(1, 13_000)))  # near the bounds
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=2**63 - 2, max_value=2**65),
    st.floats(), st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e16, 1e-7]), texts,
    st.sampled_from([Colour.RED, Level.LOW, uuid.UUID(int=7), datetime(2026, 1, 1, tzinfo=UTC), Text("x")]),
)
keys = st.one_of(st.text(characters, max_size=8), st.integers(), st.none(), st.booleans(),
                 st.floats(allow_nan=True), st.builds(Text, st.text(max_size=3)))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=6), st.tuples(inner, inner), st.dictionaries(keys, inner, max_size=6)),
    max_leaves=30)


@settings(max_examples=250, deadline=None)
@given(st.dictionaries(st.text(max_size=10), values, max_size=8))
def test_sane_is_what_json_dumps_says(data):
    assert sane(data) == by_json(data)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 120), st.text(characters, max_size=40), st.integers(0, 3))
def test_a_decision_of_any_size_is_told_as_json_dumps_tells_it(count, name, budgets):
    vms = tuple(VmRef(f"{name}-{i}", str(uuid.UUID(int=i)), f"set/{name}") for i in range(count))
    uses = tuple(BudgetUse(f"group:set/{name}", "group", count, 0, 1, 1) for _ in range(budgets))
    made = Decision(kind="approve", id="EV-1/coordinator/approve/1", subject="EV-1", time=1e9, code="fits",
                    reason=f"fits {name}", event_id="EV-1", resources=tuple(v.name for v in vms),
                    affected=vms, target=vms[0] if vms else None, attempt=1, budgets=uses)
    data = to_dict(made, "urn:test")["data"]
    assert sane(data) == by_json(data)


def test_nan_deep_in_a_decision_is_refused():
    assert not sane({"Budgets": [{"max": math.nan}]})
    assert not sane({"Budgets": [{"max": math.inf}]})


def test_a_decision_just_over_the_limit_is_refused_and_one_at_it_is_kept():
    padding = MAX_DECISION_BYTES - len(json.dumps({"Reason": ""}))
    assert sane({"Reason": "x" * padding})
    assert not sane({"Reason": "x" * (padding + 1)})
    assert not sane({"Reason": "\x7f" * (padding // 6 + 1)})  # short for orjson, over for json


def test_a_circular_decision_is_refused():
    data: dict[str, Any] = {}
    data["self"] = [data]
    assert not sane(data)
