"""``[shard]`` of ``coordinator.toml``: the subscriptions this coordinator owns, when the fleet is split
between several coordinators (docs/coordinator.md, "Shards"). Validated once, one line per problem::

    [shard]
    name = "eu"                          # 1-38 letters, digits, '.', '_', '-'; unique in the fleet
    subscriptions = ["00000000-0000-0000-0000-000000000000"]   # owned by this shard alone (required)
    peers = { us = "http://10.1.0.5:8470" }   # optional: the other shards' API (and page) addresses,
                                         # for `coordinator status --shards` and the page's links

Azure's zones, availability sets and scale sets never span two subscriptions, so a shard's budgets
count only VMs it owns. A shard is its own coordinator: its decisions' source, its lease and its
snapshot carry ``<name>/<shard>`` (``ServiceSettings.unit``), and its consumer group is
``coordinator-<shard>`` unless ``[eventhub] consumer_group`` says otherwise. Without the section
the coordinator owns every subscription, as before.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ....errors import ConfigError
from ....validation import as_str, no_unknown

KEYS = ("name", "subscriptions", "peers")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,37}\Z")  # coordinator-<name>: a consumer group, 50 at most
_URL = re.compile(r"^https?://[^/\s]+\Z")  # as [api] advertise: the API is plain http on a private address


@dataclass(frozen=True)
class ShardSettings:
    name: str
    subscriptions: frozenset[str]  # lower case
    peers: Mapping[str, str] = field(default_factory=dict)  # other shard -> its API's base URL

    def owns(self, subscription: str) -> bool:
        return subscription.lower() in self.subscriptions

    def as_data(self) -> dict[str, Any]:
        """The ``shard`` member of ``status``'s ``service`` (and of the page's document)."""
        return {"name": self.name, "subscriptions": sorted(self.subscriptions), "peers": dict(self.peers)}

    @property
    def consumer_group(self) -> str:
        """The consumer group a shard reads in by default (the Bicep's ``coordinatorShards`` makes it)."""
        return f"coordinator-{self.name}"


def load_shard(raw: Any) -> ShardSettings | None:
    """``[shard]`` (module docstring); None when the section is absent."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError("shard: must be a table ([shard])")
    no_unknown(raw, "shard", KEYS)
    name = _name(raw.get("name"), "shard.name")
    listed = raw.get("subscriptions")
    if not isinstance(listed, list) or not listed:
        raise ConfigError("shard.subscriptions: give the subscription ids this shard owns, e.g. "
                          "[\"00000000-0000-0000-0000-000000000000\"]")
    seen: set[str] = set()
    for i, sub in enumerate(listed):
        try:
            text = str(uuid.UUID(as_str(sub, f"shard.subscriptions[{i}]").strip()))
        except ValueError:
            raise ConfigError(f"shard.subscriptions[{i}]: {str(sub)[:60]!r} is not a subscription id "
                              "(a GUID)") from None
        if text in seen:
            raise ConfigError(f"shard.subscriptions[{i}]: {text} is listed twice")
        seen.add(text)
    return ShardSettings(name, frozenset(seen), _peers(raw.get("peers", {}), name))


def _name(value: Any, where: str) -> str:
    if value is None:
        raise ConfigError(f"{where}: missing (the shard's name, e.g. \"eu\")")
    text = as_str(value, where).strip()
    if not _NAME.match(text):
        raise ConfigError(f"{where}: {text!r} must be 1-38 letters, digits, '.', '_' or '-' (its consumer "
                          "group is coordinator-<name>)")
    return text


def _peers(value: Any, own: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ConfigError("shard.peers: must be a table of shard name = its API's URL, e.g. "
                          "{ us = \"http://10.1.0.5:8470\" }")
    peers: dict[str, str] = {}
    for peer, url in value.items():
        name = _name(peer, "shard.peers")
        if name == own:
            raise ConfigError(f"shard.peers.{name}: is this shard's own name")
        text = as_str(url, f"shard.peers.{name}").strip().rstrip("/")
        if not _URL.match(text):
            raise ConfigError(f"shard.peers.{name}: {text[:100]!r} is not a base URL like http://10.1.0.5:8470")
        peers[name] = text
    return peers


def check_within(listed: tuple[str, ...] | None, shard: ShardSettings, where: str) -> None:
    """``[azure] subscriptions`` and ``[trust] subscriptions`` may name only the shard's own."""
    for sub in listed or ():
        if not shard.owns(sub):
            raise ConfigError(f"{where}: {sub} is not one of [shard] subscriptions (another shard's "
                              "subscription: each shard reads and approves only its own)")
