"""High availability: which instance acts, and the fold's checkpoint that a new one starts from.

``lease.Lease`` is the leader blob's lease; ``election.LeaderElection`` keeps or takes it on a
thread of its own and lets an instance act only once it read both hubs to their ends.
``snapshot_blob.SnapshotBlob`` is the signed snapshot of the fold with the positions it covers;
``keeper.Keeper`` saves and loads it off the loop, with deadlines and backoff.
"""

from __future__ import annotations

from .keeper import Keeper, Loaded
from .lease import Lease, ensure_container
from .snapshot_blob import SnapshotBlob

__all__ = [
    "Keeper", "Lease", "Loaded", "SnapshotBlob", "ensure_container"
]
