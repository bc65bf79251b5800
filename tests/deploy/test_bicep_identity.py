"""Attaching the agent's identity keeps the identities a VM already has (system- and user-assigned).

The identity block of the VM PUT in vm-agent.bicep is evaluated, as pycep-parser reads it, for VMs
with every kind of identity; the identities before the PUT come from vm-identity.bicep's outputs,
evaluated the same way over the VM as ARM returns it.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

IDENTITIES = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities"
AGENT, OTHER, BACKUP = f"{IDENTITIES}/agent-0", f"{IDENTITIES}/app", f"{IDENTITIES}/backup"
MISSING = object()


def evaluate(node: Any, env: dict[str, Any]) -> Any:
    """The value of a pycep expression tree (the operators these templates use) in ``env``."""
    if isinstance(node, str):
        if node in env:
            return env[node]
        return re.sub(r"\$\{(\w+)\}", lambda m: str(env[m.group(1)]), node.strip("'"))
    if isinstance(node, bool | int) or node is None:
        return node
    if "operator" in node:
        op = node["operator"]
        kind, operands = op["type"], op["operands"]
        if kind == "property_accessor":  # a.b.c is accessor(a, accessor(b, c)); `.?` reads the same
            value, rest = evaluate(operands["operand_1"], env), operands["operand_2"]
            while isinstance(rest, dict) and rest.get("operator", {}).get("type") == "property_accessor":
                value = _get(value, rest["operator"]["operands"]["operand_1"])
                rest = rest["operator"]["operands"]["operand_2"]
            return _get(value, rest)
        if kind == "coalesce":
            first = evaluate(operands["operand_1"], env)
            return evaluate(operands["operand_2"], env) if first in (None, MISSING) else first
        if kind == "and":
            return evaluate(operands["operand_1"], env) and evaluate(operands["operand_2"], env)
        if kind == "conditional":
            branch = "true_value" if evaluate(operands["condition"], env) else "false_value"
            return evaluate(operands[branch], env)
        raise AssertionError(f"operator {kind} not modelled")
    if "function" in node:
        fn = node["function"]
        args = [evaluate(a, env) for a in fn["parameters"].values()]
        if fn["type"] == "contains":
            return args[1] in args[0]
        if fn["type"] == "union":
            return {k: v for arg in args for k, v in arg.items()}
        raise AssertionError(f"function {fn['type']} not modelled")
    return {evaluate(k, env): evaluate(v, env) for k, v in node.items()}


def _get(value: Any, name: str) -> Any:
    return value.get(name, MISSING) if isinstance(value, dict) else MISSING


def identity_after_attach(bicep_docs: dict[str, dict], vm: dict[str, Any]) -> dict[str, Any]:
    """The identity block vm-agent.bicep PUTs on ``vm`` (the VM as ARM returns it)."""
    reader = bicep_docs["modules/vm-identity.bicep"]
    outputs = {name: evaluate(out["value"], {"existingVm": vm})
               for name, out in reader["outputs"].items()}
    agent = bicep_docs["modules/vm-agent.bicep"]
    env: dict[str, Any] = {"attachIdentity": True, "agentIdentityId": AGENT,
                           "current": {"outputs": outputs}}
    for name in ("keepsSystemAssigned", "mergedIdentityType"):
        env[name] = evaluate(agent["variables"][name]["value"], env)
    block = agent["resources"]["vm"]["config"]["config"]["identity"]
    return {"type": evaluate(block["type"], env),
            "userAssignedIdentities": evaluate(block["userAssignedIdentities"], env)}


def arm(type_: str | None, *user_assigned: str) -> dict[str, Any]:
    """A VM as ARM's GET returns it, with this identity (None: no identity block at all)."""
    vm: dict[str, Any] = {"name": "web-01", "location": "westeurope"}
    if type_ is not None:
        vm["identity"] = {"type": type_, "principalId": "p-sys", "tenantId": "t"}
        if user_assigned:
            vm["identity"]["userAssignedIdentities"] = {
                uid: {"principalId": f"p-{i}", "clientId": f"c-{i}"} for i, uid in enumerate(user_assigned)}
    return vm


@pytest.mark.parametrize(("vm", "kind", "kept"), [
    (arm(None), "UserAssigned", set()),
    (arm("None"), "UserAssigned", set()),
    (arm("SystemAssigned"), "SystemAssigned, UserAssigned", set()),
    (arm("UserAssigned", OTHER), "UserAssigned", {OTHER}),
    (arm("SystemAssigned, UserAssigned", OTHER, BACKUP), "SystemAssigned, UserAssigned",
     {OTHER, BACKUP}),
], ids=["no identity block", "None", "system-assigned", "user-assigned", "both"])
def test_attaching_the_agent_identity_keeps_what_the_vm_has(bicep_docs, vm, kind, kept):
    identity = identity_after_attach(bicep_docs, vm)
    assert identity["type"] == kind
    assert set(identity["userAssignedIdentities"]) == kept | {AGENT}


def test_attaching_twice_changes_nothing(bicep_docs):
    first = identity_after_attach(bicep_docs, arm("SystemAssigned, UserAssigned", OTHER))
    again = identity_after_attach(bicep_docs, arm(first["type"], *first["userAssignedIdentities"]))
    assert again["type"] == first["type"] == "SystemAssigned, UserAssigned"
    assert set(again["userAssignedIdentities"]) == set(first["userAssignedIdentities"]) == {
        OTHER, AGENT}


def test_the_identities_are_read_before_the_put_in_a_deployment_of_their_own(bicep_docs):
    reader = bicep_docs["modules/vm-identity.bicep"]
    (existing,) = reader["resources"].values()
    assert existing["type"] == "Microsoft.Compute/virtualMachines" and existing["existing"] is True
    assert not [r for r in reader["resources"].values() if not r.get("existing")]  # reads only
    agent = bicep_docs["modules/vm-agent.bicep"]
    module = agent["modules"]["current"]
    assert module["detail"]["path"] == "vm-identity.bicep"
    # read whether or not the identity is attached: the VM's vmId names its queue too
    assert "condition" not in module["config"]
    main = bicep_docs["main.bicep"]
    assert not {"vmIdentityType", "vmExtraUserAssignedIdentities"} & set(main["parameters"])
