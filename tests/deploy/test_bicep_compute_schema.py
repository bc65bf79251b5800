"""The Compute resources the Bicep writes (a VM's identity, its extensions, the Scheduled Events
opt-in of VMs and scale sets) against Compute's own schema: every property they set is one the
resource type has, as the models of azure-mgmt-compute (generated from Azure's REST specification,
for its latest api-version) declare it, down to the leaves. No Bicep compiler can be installed
here (docs/deploy.md, "What has been checked"); this is the check that stands in for it where a
mistake costs most: a PUT of someone's existing VM.

A property that exists in the latest api-version may not exist in an older one: the properties
that arrived late are listed in ``INTRODUCED`` (from the SDK's and Az.Compute's changelogs), and a
resource that sets one must name at least that api-version.
"""

from __future__ import annotations

import typing
from typing import Any

import pytest
from azure.mgmt.compute import models
from azure.mgmt.compute._utils.model_base import Model

from .bicep_tree import module_body

RESOURCES = {  # (file, symbolic name) -> the model of that resource type
    ("modules/scheduled-events-policy.bicep", "vms"): models.VirtualMachine,
    ("modules/scheduled-events-policy.bicep", "sets"): models.VirtualMachineScaleSet,
    ("modules/vm-agent.bicep", "vm"): models.VirtualMachine,
    ("modules/vm-agent.bicep", "linuxInstaller"): models.VirtualMachineExtension,
    ("modules/vm-agent.bicep", "windowsInstaller"): models.VirtualMachineExtension,
}
# Properties that arrived with a later api-version than the rest: their path and that version.
INTRODUCED = {
    "properties.scheduledEventsPolicy.scheduledEventsAdditionalPublishingTargets.eventGridAndResourceGraph"
    ".scheduledEventsApiVersion": "2025-04-01",
    "properties.scheduledEventsPolicy.allInstancesDown": "2025-04-01",
}
TOP_LEVEL = {"name", "parent", "location", "tags", "dependsOn", "scope"}  # the template's, not the body's


def fields(cls: type) -> dict[str, Any]:
    """REST name -> annotated type of every field of a model class."""
    cls()  # the models compute their field table on first use
    hints = typing.get_type_hints(cls, localns={"_models": models})
    return {rf._rest_name: hints.get(attr) for attr, rf in cls._attr_to_rest_field.items()}


def model_of(annotation: Any) -> type | None:
    """The model class inside Optional[...], list[...], dict[str, ...], or None for a leaf."""
    for arg in typing.get_args(annotation) or (annotation,):
        if isinstance(arg, type) and issubclass(arg, Model):
            return arg
        inner = model_of(arg) if typing.get_args(arg) else None
        if inner:
            return inner
    return None


def literal(value: Any, doc: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The object(s) a property's value stands for: a literal, a variable, or union(...) of them."""
    if isinstance(value, dict) and "function" in value:
        fn = value["function"]
        if fn["type"] != "union":
            return None
        out = []
        for arg in fn["parameters"].values():
            out += literal(arg, doc) or []
        return out
    if isinstance(value, dict) and "operator" in value:
        op = value["operator"]
        if op["type"] == "conditional":
            return (literal(op["operands"]["true_value"], doc) or []) + (
                literal(op["operands"]["false_value"], doc) or [])
        return None
    if isinstance(value, dict):
        return [value]
    if isinstance(value, str) and value in (doc.get("variables") or {}):
        return literal(doc["variables"][value]["value"], doc)
    return None


def walk(obj: dict[str, Any], cls: type, path: str, doc: dict[str, Any], seen: list[str]) -> list[str]:
    """Paths in ``obj`` that ``cls`` has no field for."""
    unknown = []
    known = fields(cls)
    for key, value in obj.items():
        key = key.strip("'")
        here = f"{path}.{key}" if path else key
        if key not in known:
            if not path and key in TOP_LEVEL:
                continue
            unknown.append(here)
            continue
        seen.append(here)
        inner = model_of(known[key])
        if inner is None:
            continue
        if key == "userAssignedIdentities":  # keyed by identity resource IDs, not field names
            continue
        for part in literal(value, doc) or []:
            unknown += walk(part, inner, here, doc, seen)
    return unknown


@pytest.mark.parametrize(("where", "cls"), list(RESOURCES.items()),
                         ids=[f"{f}:{n}" for f, n in RESOURCES])
def test_every_property_the_bicep_sets_is_in_computes_schema(bicep_docs, where, cls) -> None:
    path, name = where
    doc = bicep_docs[path]
    resource = doc["resources"][name]
    seen: list[str] = []
    assert walk(module_body(resource), cls, "", doc, seen) == []
    assert seen  # something was checked
    for prop, since in INTRODUCED.items():
        if any(s == prop or s.startswith(prop + ".") for s in seen):
            assert resource["api_version"] >= since, (where, prop)


def test_the_scheduled_events_opt_in_reaches_the_properties_that_arrived_late(bicep_docs) -> None:
    seen: list[str] = []
    doc = bicep_docs["modules/scheduled-events-policy.bicep"]
    walk(module_body(doc["resources"]["vms"]), models.VirtualMachine, "", doc, seen)
    assert set(INTRODUCED) <= set(seen)
    assert "properties.scheduledEventsPolicy.allInstancesDown.automaticallyApprove" in seen


def test_a_property_compute_does_not_have_is_found(bicep_docs) -> None:
    doc = {"variables": {}}
    wrong = {"properties": {"scheduledEventsPolicy": {"allInstancesDown": {"autoApprove": True}}}}
    assert walk(wrong, models.VirtualMachine, "", doc, []) == [
        "properties.scheduledEventsPolicy.allInstancesDown.autoApprove"]
