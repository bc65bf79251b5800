"""ARM's limits for a fleet of 300 VMs in one subscription: at most 800 resources in one template
(copy loops counted, each module one resource of its caller and a template of its own), 256
parameters, 256 variables, 64 outputs.

No Bicep compiler can be installed from the registries this project uses (docs/deploy.md, "What has
been checked"), so the templates are counted as pycep-parser reads them: every resource and module,
a loop counted as its array's length in the deployment below. An array a loop runs over that the
deployment does not size fails the test, so a new loop must be sized here too. Resources declared
`existing` are counted as well (an upper bound).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

ARM_MAX_RESOURCES = 800
VMS = 300
BATCH = 100  # agents.bicep's default batchSize
MAX_SHARDS = 18  # hub.bicep's coordinatorShards @maxLength


def instances(node: dict[str, Any], sizes: dict[str, int], where: str) -> int:
    """How many times ARM deploys this resource or module: 1, or its loop's length."""
    loop = node["config"].get("loop_type")
    if not loop:
        return 1
    if loop["type"] == "range":
        count = loop["detail"]["count"]
        assert count in sizes, f"{where}: loop over range(..., {count}) is not sized by this test"
        return sizes[count]
    name = loop["detail"]["array_name"]
    assert isinstance(name, str) and name in sizes, f"{where}: loop over {name} is not sized by this test"
    return sizes[name]


def resources(doc: dict[str, Any], sizes: dict[str, int], path: str) -> int:
    return sum(instances(node, sizes, f"{path}:{name}")
               for kind in ("resources", "modules") for name, node in (doc.get(kind) or {}).items())


def sizes_for(vms: int, batch: int, resource_groups: int, scale_sets: int = 0) -> dict[str, dict[str, int]]:
    """Loop lengths per template for `vms` VMs of one subscription in `resource_groups` groups,
    the coordinator reading each group and every VM opted in to Azure's feed, and `scale_sets`
    autoscaled uniform scale sets."""
    return {
        "main.bicep": {},
        "hub.bicep": {},
        "agents.bicep": {"batchCount": math.ceil(vms / batch), "coordinatorResourceGroups": resource_groups,
                         "scheduledEventsTargets": resource_groups, "scaleSets": scale_sets},
        "modules/agent-batch.bicep": {"vms": batch},
        # the coordinator's shards' consumer groups, at hub.bicep's most
        "modules/eventhubs.bicep": {"coordinatorShards": MAX_SHARDS},
        "modules/azure-feed.bicep": {"coordinatorShards": MAX_SHARDS},
        # one call per resource group: its standalone VMs (the worst case: all of them in one group)
        "modules/scheduled-events-policy.bicep": {"vmNames": vms, "scaleSetNames": 0},
    }


@pytest.mark.parametrize(("vms", "batch", "groups", "sets"), [
    (VMS, BATCH, 1, 0), (VMS, BATCH, 3, 0), (VMS, 350, 1, 0), (10_000, BATCH, 50, 100)])
def test_no_template_of_a_subscriptions_fleet_passes_arms_limits(bicep_docs, vms, batch, groups,
                                                                 sets) -> None:
    sizes = sizes_for(min(vms, 350), batch, groups, sets)  # one policy call: at most 350 VMs (see docs)
    sizes["agents.bicep"]["batchCount"] = math.ceil(vms / batch)
    counted = {}
    for path, doc in bicep_docs.items():
        counted[path] = resources(doc, sizes.get(path, {}), path)
        assert counted[path] <= ARM_MAX_RESOURCES, (path, counted[path])
        assert len(doc.get("parameters") or {}) <= 256, path
        assert len(doc.get("variables") or {}) <= 256, path
        assert len(doc.get("outputs") or {}) <= 64, path
    assert counted["modules/agent-batch.bicep"] == 2 * batch  # two per VM, whatever each holds
    if vms == VMS:
        assert counted["agents.bicep"] == math.ceil(VMS / batch) + 1 + 2 * groups + 1 + 2 * sets


def test_the_batch_size_keeps_a_batch_under_the_limit(bicep_docs) -> None:
    batch_size = bicep_docs["agents.bicep"]["parameters"]["batchSize"]
    bounds = {d["type"]: d["argument"] for d in batch_size["decorators"]}
    assert 2 * int(bounds["max_value"]) <= ARM_MAX_RESOURCES
    assert batch_size["default"] == BATCH


def test_three_hundred_vms_in_one_subscription_counted_per_template(bicep_docs) -> None:
    """The figures docs/deploy.md gives: the largest template of a 300-VM subscription."""
    sizes = sizes_for(VMS, BATCH, 1)
    counted = {path: resources(doc, sizes.get(path, {}), path) for path, doc in bicep_docs.items()}
    largest = max(counted.values())
    assert largest <= ARM_MAX_RESOURCES
    assert counted["modules/scheduled-events-policy.bicep"] == 2 * VMS  # its `existing` reads counted
    assert counted["modules/agent-batch.bicep"] == 200
    # 3 batches, the reader role, the coordinator's roles, the feed's topic, the opt-in
    assert counted["agents.bicep"] == 7
