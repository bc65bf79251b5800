"""What each import adds to a process's RSS, in the order an agent with a webhook sink loads them,
then what a pagerduty or opsgenie sink adds (each figure is the increase over everything above
it). Linux (reads /proc/self/status).

Run: python -m bench.import_costs
"""

from __future__ import annotations

import importlib
import subprocess
import sys

MODULES = (
    "hashlib", "sqlite3", "logging", "json", "email.parser", "ssl", "http.client",
    "click", "http.server", "se_forwarder.telemetry", "se_forwarder.cli", "se_forwarder.agent",
    "se_forwarder.sinks.file", "cloudevents.core.formats.json", "requests",
    "cloudevents.core.bindings.http", "se_forwarder.sinks.webhook",
    "se_forwarder.sinks.pagerduty", "se_forwarder.sinks.opsgenie",
)


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def child() -> None:
    before = rss_mb()
    print(f"{'python itself':<34} {before:5.1f} MB")
    for name in MODULES:
        was = rss_mb()
        importlib.import_module(name)
        print(f"{name:<34} +{rss_mb() - was:4.1f} MB  -> {rss_mb():5.1f} MB")


def main() -> None:
    # A fresh interpreter: the figures must not include what the caller had loaded.
    sys.exit(subprocess.call([sys.executable, "-c", "import bench.import_costs as m; m.child()"]))


if __name__ == "__main__":
    main()
