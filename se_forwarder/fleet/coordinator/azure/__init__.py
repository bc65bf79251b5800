"""The Azure services the coordinator calls, and what answers: clients, deadlines, ARM.

``clients`` signs in as the configuration says (``Clients``: the SDKs', or stand-ins handed in by
code); ``reach`` runs calls that end at a deadline and records which part answers; ``graph``
reads Resource Graph and ARM's instance views; ``acknowledge`` posts the Maintenance
``acknowledge``. Heavy SDKs are imported only where a call is made.
"""

from __future__ import annotations

from .acknowledge import Acknowledger
from .clients import Clients, Queues, check_connection_strings
from .graph import Graph
from .reach import Overdue, Reach, begin, parts

__all__ = [
    "Acknowledger", "Clients", "Graph", "Overdue", "Queues", "Reach", "begin", "check_connection_strings",
    "parts"
]
