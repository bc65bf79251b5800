"""Which shard an event from a hub is for: the cheap check a shard makes before any signature. Pure.

A shard (``[shard]``, config/shard.py) owns a set of subscriptions; every shard may read the same
agents' hub and the same Azure feed hub. ``other_shard(event, owned)`` reads only what the event
*claims* (no key, no signature, no certificate is looked at) and says whether it is plainly another
shard's:

==========================  =====================================================================
event                       the claimed subscription
==========================  =====================================================================
an agent's report or        ``data.Vm.subscriptionId`` (every report and registration carries
registration                its VM's instance metadata, cloudevents.py)
an Azure feed event         ``source`` (``/subscriptions/<id>``), else the subscription of
                            ``data.resourceInfo.id``
a decision                  none: decisions are judged by their source (trust.py: ``foreign``)
==========================  =====================================================================

A claimed subscription the shard does not own: ``other-shard``, dropped and counted (input/
admission.py, input/azure.py) before anything costly. No claim, or an owned one: on to the checks
that verify (trust.py, azure_facts.py), which bind what a VM may say to the subscription Azure
attested (``[trust] subscriptions`` is the shard's own) and take Azure's feed only for owned
subscriptions.

Why an unverified claim may drop a report: a VM speaks only for itself, so a VM that claims another
subscription than its own can only lose its own reports (its own shard, which owns its attested
subscription, drops them); and a report that claims an owned subscription still has to verify with
a key registered by an attested document of that subscription, which another shard's VM cannot
have. The check can keep an honest report from the wrong shard, never let a dishonest one in.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ..schema import DECISION_PREFIX

OTHER_SHARD = "other-shard"
_PREFIX = "/subscriptions/"


def other_shard(event: Mapping[str, Any], owned: Collection[str]) -> str | None:
    """The claimed subscription of ``event`` when ``owned`` (lower case; empty: every one) does not
    hold it; None when the event may be this shard's (module docstring)."""
    if not owned:
        return None
    claimed = claimed_subscription(event)
    if claimed is None or claimed in owned:
        return None
    return claimed


def claimed_subscription(event: Mapping[str, Any]) -> str | None:
    """The subscription ``event`` says it is about, lower case; None when it claims none. Events
    come decoded from JSON: plain dicts are what is looked into (a cheap check, before all else)."""
    kind = event.get("type")
    if isinstance(kind, str) and kind.startswith(DECISION_PREFIX):
        return None
    data = event.get("data")
    vm = data.get("Vm") if isinstance(data, dict) else None
    if isinstance(vm, dict):
        return _text(vm.get("subscriptionId"))
    source = event.get("source")
    if isinstance(source, str) and source[:len(_PREFIX)].lower() == _PREFIX:
        return _text(source[len(_PREFIX):].split("/", 1)[0])
    info = data.get("resourceInfo") if isinstance(data, dict) else None
    rid = info.get("id") if isinstance(info, dict) else None
    if isinstance(rid, str) and rid[:len(_PREFIX)].lower() == _PREFIX:
        return _text(rid[len(_PREFIX):].split("/", 1)[0])
    return None


def _text(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip().lower()
