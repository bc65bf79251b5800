"""The way in: both hubs read, their batches queued for the service's loop and admitted into the fold.

``hub_reader.HubReader`` reads every partition of one Event Hub from given positions (no shared
checkpoint store: every instance folds everything); ``hubs.Hubs`` runs one reader for the agents'
hub and, with ``[azure.feed]``, one for Azure's feed hub, into one ``inbox.Inbox`` that the loop
empties in turns. ``admission.BatchAdmission`` is the only way from a batch into the fold: each
event of the agents' hub through the edge's gate (``intermediates`` fetches what an attested
document leaves out, on its own thread), each event of the feed hub through Azure's own check
(``azure.AzureInput``, which also runs the Resource Graph catch-ups and ``acknowledge``).
"""

from __future__ import annotations

from .hub_reader import Batch, HubReader, Position, decode, partition_ends
from .inbox import Inbox
from .intermediates import FetchError, Intermediates, parse

__all__ = [
    "Batch", "FetchError", "HubReader", "Inbox", "Intermediates", "Position", "decode", "parse",
    "partition_ends"
]
