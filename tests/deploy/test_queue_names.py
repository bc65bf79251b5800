"""The agent and the Bicep name approval queues alike: the ``queueNames`` variables of main.bicep,
parsed by pycep and evaluated by the small evaluator below (only the functions those lines use),
give the same name as ``approvals.queue.names.queue_name`` for any VM name, long ones included.

``uniqueString`` is checked against values Azure Resource Manager returned for it.
"""

from __future__ import annotations

import re
import string
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.approvals.queue.names import (
    MAX_QUEUE_NAME,
    queue_name,
    unique_string,
    vm_for_queue,
)

TEMPLATE = "se-approvals-{vm_name}"
QUEUE_VARIABLES = ("queueLowered", "queueDashed", "queueCollapsed", "queueNoLead", "queueLegal",
                   "queueShort", "queueHashes", "queueNames")
INTERPOLATION = re.compile(r"\$\{(\w+)(?:\[(\w+)\])?\}")


# -- a small evaluator of pycep's expression trees ----------------------------------------------------


def _value(node: Any, scope: dict[str, Any]) -> Any:
    """pycep writes identifiers and string literals alike, as strings: a name in scope is a
    reference, a string with ``${...}`` is interpolated (names and ``name[index]`` only)."""
    if isinstance(node, bool | int):
        return node
    if isinstance(node, str):
        if node in scope:
            return scope[node]
        return INTERPOLATION.sub(
            lambda m: str(scope[m.group(1)][scope[m.group(2)]] if m.group(2) else scope[m.group(1)]),
            node)
    if "function" in node:
        return _function(node["function"]["type"], node["function"]["parameters"], scope)
    if "operator" in node:
        return _operator(node["operator"]["type"], node["operator"]["operands"], scope)
    raise AssertionError(f"the evaluator does not know {node}")


def _function(name: str, p: dict[str, Any], scope: dict[str, Any]) -> Any:
    v = {key: _value(arg, scope) for key, arg in p.items()}
    if name == "to_lower":
        return v["string_to_change"].lower()
    if name == "replace":
        return v["original_string"].replace(v["old_string"], v["new_string"])
    if name == "starts_with":
        return v["string_to_search"].startswith(v["string_to_find"])
    if name == "ends_with":
        return v["string_to_search"].endswith(v["string_to_find"])
    if name == "take":
        return v["original_value"][:max(0, v["number_to_take"])]
    if name == "skip":
        return v["original_value"][max(0, v["number_to_skip"]):]
    if name == "length":
        return len(v["arg_1"])
    if name == "unique_string":
        return unique_string(*(v[key] for key in p))
    raise AssertionError(f"the evaluator does not know the function {name}")


def _operator(name: str, o: dict[str, Any], scope: dict[str, Any]) -> Any:
    if name == "conditional":
        branch = "true_value" if _value(o["condition"], scope) else "false_value"
        return _value(o[branch], scope)
    a, b = _value(o["operand_1"], scope), _value(o["operand_2"], scope)
    ops = {"or": lambda: a or b, "and": lambda: a and b, "not_equals": lambda: a != b,
           "equals": lambda: a == b, "greater_than": lambda: a > b, "substract": lambda: a - b,
           "add": lambda: a + b, "index_accessor": lambda: a[b]}
    if name not in ops:
        raise AssertionError(f"the evaluator does not know the operator {name}")
    return ops[name]()


def evaluate_queue_names(variables: dict[str, Any], vm_names: list[str]) -> list[str]:
    """The ``queueNames`` main.bicep computes for ``vm_names``."""
    scope: dict[str, Any] = {"vmNames": vm_names}
    for name in QUEUE_VARIABLES:
        value = variables[name]["value"]
        loop = value["loop_type"]
        items = scope[loop["detail"]["array_name"]]
        out = []
        for i, item in enumerate(items):
            inner = {**scope, loop["detail"]["item_name"]: item}
            if loop["type"] == "array_index":
                inner[loop["detail"]["index_name"]] = i
            out.append(_value(value["config"], inner))
        scope[name] = out
    return scope["queueNames"]


@pytest.fixture(scope="module")
def main_variables(bicep_docs: dict[str, dict]) -> dict[str, Any]:
    return bicep_docs["main.bicep"]["variables"]


# -- the tests ----------------------------------------------------------------------------------------


def test_unique_string_gives_what_azure_resource_manager_returned() -> None:
    assert unique_string("aaa") == "zavj67f3en4hc"
    assert unique_string("bbb") == "w5eragfxe33cy"
    assert unique_string("zzz") == "cryksdzzzawae"
    assert unique_string("xxx", "yyy", "zzz") == "lghi7k5js7itq"


def test_main_bicep_names_each_vms_queue_with_the_variables_the_evaluator_reads(
        main_variables) -> None:
    assert set(QUEUE_VARIABLES) <= set(main_variables)


@pytest.mark.parametrize("vm, expected", [
    ("vm0", "se-approvals-vm0"),
    ("Web-01", "se-approvals-web-01"),
    ("vmss_3", f"se-approvals-vmss-3-{unique_string('vmss_3')}"),
    ("web.01", f"se-approvals-web-01-{unique_string('web.01')}"),
    ("a" * 64, f"se-approvals-{'a' * 29}-{unique_string('a' * 64)}"),
])
def test_known_names_agree(main_variables, vm, expected) -> None:
    assert queue_name(TEMPLATE, vm) == expected
    assert evaluate_queue_names(main_variables, [vm]) == [expected]


# Azure VM names: letters, digits, '-', '.', and '_' in scale-set instance names (vmss_3); up to 64.
vm_names = st.text(alphabet=string.ascii_letters + string.digits + "-._", min_size=1, max_size=64)


@settings(max_examples=300, deadline=None)
@given(st.lists(vm_names, min_size=1, max_size=8))
def test_bicep_and_agent_give_the_same_queue_names(main_variables, names) -> None:
    names = [n for n in names if any(c.isalnum() for c in n)]
    bicep = evaluate_queue_names(main_variables, names)
    assert bicep == [queue_name(TEMPLATE, n) for n in names]
    for name in bicep:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name) and 3 <= len(name) <= MAX_QUEUE_NAME


@settings(max_examples=300, deadline=None)
@given(vm_names, vm_names)
def test_two_vms_never_share_a_queue(a, b) -> None:
    if a.lower() != b.lower():
        assert queue_name(TEMPLATE, a) != queue_name(TEMPLATE, b)


@settings(max_examples=300, deadline=None)
@given(vm_names)
def test_a_queue_name_tells_its_vm_only_when_it_is_the_vm_name(vm) -> None:
    queue = queue_name(TEMPLATE, vm)
    told = vm_for_queue(TEMPLATE, queue)
    assert told is None or told == vm.lower()
    if queue == f"se-approvals-{vm.lower()}" and not re.search(r"-[a-z2-7]{13}$", queue):
        assert told == vm.lower()
