"""Profile of the poll path: the agent's poller against the simulator without ETag (as IMDS is
documented), unchanged document, in this process under cProfile.

Prints the CPU per poll measured without the profiler, then the functions that take the most
time per poll (own time), so the cost of an idle poll can be read function by function. Run as
``python -m bench.poll_profile [--polls N] [--etag]``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import threading
import time
from pathlib import Path

from bench.common import Row
from se_forwarder.config import from_dict
from se_forwarder.imds import ImdsClient
from se_forwarder.model import VmIdentity
from se_forwarder.outbox import Outbox
from se_forwarder.poller import Poller
from se_forwarder.simulator import SimulatorServer

TOP = 15


def _poller(url: str, state: Path) -> tuple[Poller, ImdsClient, Outbox]:
    settings = from_dict({"imds": {"url": url}, "state": {"dir": str(state)}})
    imds = ImdsClient(url)
    outbox = Outbox(state)
    poller = Poller(settings, imds, outbox, lambda: VmIdentity.from_hostname("bench"),
                    offer=lambda _doc, _transitions: None, on_recorded=lambda: None,
                    stop=threading.Event())
    return poller, imds, outbox


def measure(polls: int = 2000, etag: bool = False) -> tuple[float, pstats.Stats]:
    """(CPU seconds per poll without the profiler, profile of as many polls)."""
    with tempfile.TemporaryDirectory() as tmp, SimulatorServer(etag=etag) as sim:
        sim.sim.add_event({"EventType": "Freeze", "DurationInSeconds": 30, "Resources": ["x"],
                           "NotBeforeInSeconds": 86400})
        poller, imds, outbox = _poller(sim.url, Path(tmp))
        try:
            for _ in range(20):  # the first document is recorded; the rest are unchanged
                poller.poll_or_raise()
            imds.limiter.limit = 10**9  # the limiter sleeps otherwise; its own cost stays
            began = time.thread_time()
            for _ in range(polls):
                poller.poll_or_raise()
            per_poll = (time.thread_time() - began) / polls
            profile = cProfile.Profile(time.thread_time)  # CPU of this thread, not waits
            profile.enable()
            for _ in range(polls):
                poller.poll_or_raise()
            profile.disable()
        finally:
            imds.close()
            outbox.close()
    return per_poll, pstats.Stats(profile)


def sample_body(polls: int = 1000) -> float:
    """CPU seconds of one iteration of the documented sample's loop body (``requests.get`` and
    ``json.loads``), in this thread, against the same simulator: the in-process baseline."""
    import json

    import requests

    with SimulatorServer(etag=False) as sim:
        sim.sim.add_event({"EventType": "Freeze", "DurationInSeconds": 30, "Resources": ["x"],
                           "NotBeforeInSeconds": 86400})
        url = sim.url + "/metadata/scheduledevents"
        for _ in range(20):
            json.loads(requests.get(url, headers={"Metadata": "true"},
                                    params={"api-version": "2020-07-01"}, timeout=5).text)
        began = time.thread_time()
        for _ in range(polls):
            json.loads(requests.get(url, headers={"Metadata": "true"},
                                    params={"api-version": "2020-07-01"}, timeout=5).text)
        return (time.thread_time() - began) / polls


def table(stats: pstats.Stats, polls: int, top: int = TOP) -> str:
    """The ``top`` functions by own time, in µs per poll, with their cumulative time."""
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]  # type: ignore[attr-defined]
    lines = [f"{'own µs/poll':>11} {'cum µs/poll':>11} {'calls/poll':>10}  function"]
    for (path, line, name), (_cc, calls, own, cum, _callers) in rows:
        where = path.split("site-packages/")[-1].split("/se_forwarder/")[-1]
        lines.append(f"{own / polls * 1e6:11.1f} {cum / polls * 1e6:11.1f} {calls / polls:10.1f}  "
                     f"{name} ({Path(where).name}:{line})")
    return "\n".join(lines)


def run() -> list[Row]:
    base = sample_body()
    rows = [Row("poll path", "sample loop body (requests.get + json.loads), in process, no ETag",
                f"{base * 1e6:.0f} µs CPU", ratio="baseline")]
    for etag in (False, True):
        per_poll, _ = measure(1000, etag)
        mode = "with ETag" if etag else "no ETag"
        rows.append(Row("poll path", f"agent poller, one unchanged poll, in process, {mode}",
                        f"{per_poll * 1e6:.0f} µs CPU", ratio=f"{per_poll / base:.2f}x the sample"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.poll_profile")
    parser.add_argument("--polls", type=int, default=2000)
    parser.add_argument("--etag", action="store_true", help="let the simulator send ETags (304s)")
    args = parser.parse_args()
    per_poll, stats = measure(args.polls, args.etag)
    mode = "with ETag/304" if args.etag else "without ETag (documented IMDS)"
    print(f"poll path, unchanged document, {mode}: {per_poll * 1e6:.0f} µs CPU per poll "
          f"(poller thread, {args.polls} polls, no profiler)")
    print(f"top {TOP} functions by own time under cProfile (the profiler inflates small calls):")
    print(table(stats, args.polls))


if __name__ == "__main__":
    main()
