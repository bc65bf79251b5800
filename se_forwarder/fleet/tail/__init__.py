"""``se-forwarder fleet tail``: a live table of scheduled events across the fleet, from Event Hubs.

``table`` (the deduplicated table, no Azure), ``reader`` (where the hub is, checkpoints, the
receiving callbacks, ``cloud_event_of``), ``command`` (the loop the CLI runs).
"""

from .reader import HubSource, checkpoint_store, cloud_event_of, ensure_container, hub_source
from .table import FleetTable, Row

__all__ = ["FleetTable", "HubSource", "Row", "checkpoint_store", "cloud_event_of", "ensure_container",
           "hub_source"]
