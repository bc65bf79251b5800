"""The read model, pure and JSON-serialisable: what ``coordinator status`` prints and the page shows.

``status`` (fleet, groups, events, decisions), ``azure`` (agentless VMs and where Azure and an
agent disagree), ``timeline`` (each VM's Scheduled, approved, Started and healthy spans) and
``page`` (the fleet page's one compact document).
"""

from __future__ import annotations

from .groups import groups
from .page import page_view
from .timeline import Span, down, peak, spans

__all__ = [
    "Span", "down", "groups", "page_view", "peak", "spans"
]
