"""``se-forwarder demo``: the product on an embedded simulator, with no Azure and no configuration.

Two demos: ``one_vm.py`` (``demo``: one simulated VM and its agent) and ``fleet.py`` (``demo
--fleet``: a fleet of simulated VMs, an agent per VM, the coordinator and its fleet page, over the
demo's own in-process transport, ``transport/``). Only the one-VM demo is imported here: the fleet
demo needs the ``fleet`` extra.
"""

from .one_vm import run_demo

__all__ = ["run_demo"]
