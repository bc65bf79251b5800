"""Which VMs this coordinator may approve for: with ``[shard]``, only VMs of its own subscriptions. Pure.

The edge already drops what claims another shard's subscription (edge/shard.py), and registrations
bind keys only for the shard's subscriptions, so another shard's VM should never be in the fold.
This is the last line should one slip through (a report with no claimed subscription, a snapshot
from before the split, a row of Azure's): a VM is *owned* when every subscription known for it (its
record's, from its reports or from Azure, and the one its registration's attested document names) is
one of ``policy.subscriptions``, and at least one is known. An event with an affected VM that is not
owned waits (``other-shard``, decide/rules.py); no approval, retry or approve-now targets such a VM,
and acknowledge is never called for another subscription's event. Without ``[shard]``
(``policy.subscriptions`` empty) every VM is owned.
"""

from __future__ import annotations

from ..config.policy import Policy
from ..fold.state import FleetState


def owned(state: FleetState, policy: Policy, vm: str) -> bool:
    """Whether ``vm`` (a VM key of the fold) is of a subscription this coordinator owns."""
    if not policy.subscriptions:
        return True
    record = state.vms.get(vm)
    identity = state.identities.get(vm)
    said = (record.subscription if record else "", identity.subscription if identity else "")
    known = {s.lower() for s in said if s}
    return bool(known) and known <= policy.subscriptions


def not_owned(state: FleetState, policy: Policy, vms: tuple[str, ...]) -> str | None:
    """The first of ``vms`` this coordinator does not own, or None."""
    if not policy.subscriptions:
        return None
    return next((vm for vm in vms if not owned(state, policy, vm)), None)


def subscription_owned(policy: Policy, subscription: str) -> bool:
    """Whether an event of Azure's in ``subscription`` may be acknowledged by this coordinator."""
    return not policy.subscriptions or subscription.lower() in policy.subscriptions
