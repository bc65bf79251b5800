"""``coordinator.toml``, validated once, one ConfigError naming the key per problem.

``service`` reads the file and each section: ``hub`` (``[eventhub]``, ``[azure.feed]`` and how to
sign in), ``policy`` (budgets, blackouts), ``trust`` (``[trust]``, with the attestation
``anchors``), ``azure``, ``limits``, ``web`` and ``notify``. Nothing here imports the rest of the
coordinator.
"""

from __future__ import annotations

from .anchors import default_roots
from .azure import AzureSettings
from .hub import Access, EventHubSettings
from .limits import Limits, load_limits
from .notify import NotifySettings, hook_url, load_notify
from .policy import Blackout, Policy, load_policy
from .service import QueueSettings, from_dict, load
from .trust import TrustSettings
from .web import WebSettings

__all__ = [
    "Access", "AzureSettings", "Blackout", "EventHubSettings", "Limits", "NotifySettings", "Policy",
    "QueueSettings", "TrustSettings", "WebSettings", "default_roots", "from_dict", "hook_url", "load",
    "load_limits", "load_notify", "load_policy"
]
