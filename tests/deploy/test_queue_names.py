"""The agent, the coordinator and the Bicep name approval queues alike.

The Bicep names each VM's queue from its vmId (``queueName`` of modules/vm-hub-access.bicep, parsed
by pycep and evaluated by the small evaluator below): the same name as
``approvals.queue.names.queue_name("se-approvals-{vm_id}", ...)`` gives the agent (its config's
template, bicep/agent-config.toml) and the coordinator ([queues] queue of deploy/coordinator.toml),
for any vmId, so that VMs of one name in two resource groups or subscriptions never share a queue.
The ``{vm_name}`` rule, for hand-made configs, is checked for any VM name.

``uniqueString`` is checked against values Azure Resource Manager returned for it.
"""

from __future__ import annotations

import re
import string
import tomllib
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
from tests.support.paths import ROOT as REPO

TEMPLATE = "se-approvals-{vm_name}"
VM_ID_TEMPLATE = "se-approvals-{vm_id}"
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


def bicep_queue_name(module: dict[str, Any], vm_id: str) -> str:
    """The queue vm-hub-access.bicep makes for the VM with this vmId."""
    scope: dict[str, Any] = {"vmId": vm_id}
    for name in ("vmIdLowered", "queueName"):
        scope[name] = _value(module["variables"][name]["value"], scope)
    return scope["queueName"]


@pytest.fixture(scope="module")
def access_module(bicep_docs: dict[str, dict]) -> dict[str, Any]:
    return bicep_docs["modules/vm-hub-access.bicep"]


# -- the tests ----------------------------------------------------------------------------------------


def test_unique_string_gives_what_azure_resource_manager_returned() -> None:
    assert unique_string("aaa") == "zavj67f3en4hc"
    assert unique_string("bbb") == "w5eragfxe33cy"
    assert unique_string("zzz") == "cryksdzzzawae"
    assert unique_string("xxx", "yyy", "zzz") == "lghi7k5js7itq"


def test_the_agent_and_the_coordinator_are_configured_with_the_vm_id_template() -> None:
    text = (REPO / "bicep/agent-config.toml").read_text()
    text = text.replace("@@TAG_NAMES@@", "[]").replace("@@DRY_RUN@@", "false")
    agent = tomllib.loads(text.replace("@@COORDINATOR_ONLY@@", "true"))
    assert agent["approvals"]["queue"]["queue"] == VM_ID_TEMPLATE
    coordinator = tomllib.loads((REPO / "deploy/coordinator.toml").read_text())
    assert coordinator["queues"]["queue"] == VM_ID_TEMPLATE
    assert access_queue_resource_name() == "queueName"


def access_queue_resource_name() -> str:
    text = (REPO / "bicep/modules/vm-hub-access.bicep").read_text()
    (name,) = re.findall(r"resource queue '[^']+' = \{\n  parent: queueService\n  name: (\w+)", text)
    return name


@pytest.mark.parametrize("vm, expected", [
    ("vm0", "se-approvals-vm0"),
    ("Web-01", "se-approvals-web-01"),
    ("vmss_3", f"se-approvals-vmss-3-{unique_string('vmss_3')}"),
    ("web.01", f"se-approvals-web-01-{unique_string('web.01')}"),
    ("a" * 64, f"se-approvals-{'a' * 29}-{unique_string('a' * 64)}"),
])
def test_known_vm_name_queues(vm, expected) -> None:
    assert queue_name(TEMPLATE, vm) == expected


@settings(max_examples=300, deadline=None)
@given(st.uuids(), st.booleans(), st.text(alphabet=string.ascii_letters, min_size=1, max_size=64))
def test_bicep_agent_and_coordinator_give_the_same_queue_for_a_vm_id(access_module, vm_id, upper,
                                                                     name) -> None:
    text = str(vm_id).upper() if upper else str(vm_id)  # ARM and IMDS may differ in case
    bicep = bicep_queue_name(access_module, text)
    assert bicep == queue_name(VM_ID_TEMPLATE, name, text)
    assert bicep == queue_name(VM_ID_TEMPLATE, "other", text.lower())
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", bicep) and 3 <= len(bicep) <= MAX_QUEUE_NAME


@settings(max_examples=300, deadline=None)
@given(st.uuids(), st.uuids())
def test_two_vm_ids_never_share_a_queue(a, b) -> None:
    if a != b:
        assert queue_name(VM_ID_TEMPLATE, "web-01", str(a)) != queue_name(VM_ID_TEMPLATE, "web-01", str(b))


# Azure VM names: letters, digits, '-', '.', and '_' in scale-set instance names (vmss_3); up to 64.
vm_names = st.text(alphabet=string.ascii_letters + string.digits + "-._", min_size=1, max_size=64)


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
