"""The read model, pure and JSON-serialisable: what ``coordinator status`` prints and the page shows.

``status`` (fleet, budgets, events, decisions), ``groups`` (each VM's state in its group, and each
group summarised), ``azure`` (agentless VMs and where Azure and an agent disagree), ``timeline``
(each VM's Scheduled, approved, Started and healthy spans) and ``page`` (the fleet page's one
compact document, and a group's VMs or a search read later).
"""

from __future__ import annotations

from .groups import groups
from .page import page_view
from .timeline import Span, down, peak, spans

__all__ = [
    "Span", "down", "groups", "page_view", "peak", "spans"
]
