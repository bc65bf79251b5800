"""The IMDS faults the simulator can inject (``POST /control/faults``), as the tests arm them."""

from __future__ import annotations

# Each fault once, by itself: the agent must resume polling and report only true transitions.
IMDS_FAULTS: list[dict[str, object]] = [
    {"status": 500, "count": 4},
    {"status": 503, "count": 3},
    {"status": 429, "count": 4},
    {"delay_seconds": 0.5, "count": 3},
    {"hang": True, "hang_seconds": 3, "count": 2},
    {"body": "not json", "count": 5},
    {"truncate": True, "count": 3},
    {"huge_body": True, "count": 2},
    {"incarnation_reset": True},
]
IMDS_FAULT_IDS = ["500", "503", "429", "latency", "hang", "garbage", "truncated", "10MB", "incarnation-reset"]

# A storm: drawn at random, one after another, while events change.
STORM = [
    {"status": 429, "count": 6},
    {"status": 500, "count": 3},
    {"status": 503, "count": 3},
    {"hang": True, "hang_seconds": 2, "count": 1},
    {"body": "not json", "count": 5},
    {"truncate": True, "count": 3},
    {"huge_body": True, "count": 2},
    {"incarnation_reset": True},
]
