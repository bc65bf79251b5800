"""`se-forwarder demo`: the simulator and the agent in one process, ending with a summary.

What it prints is meant for someone who has never seen Azure Scheduled Events: a header saying
what is simulated and how fast, the CloudEvents in columns (``sinks/pretty.py`` with ``explain``:
each kind explained the first time it appears), then what happened to each event and what to try
next. Every line fits in 100 columns.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

from .. import config as cfg
from ..agent import Agent
from ..outbox import Outbox
from ..sinks.pretty import ID_WIDTH, WIDTH, approved_by_words
from ..telemetry import setup_logging

STATES = ("scheduled", "approved", "started", "completed", "recovered", "canceled")
SCENARIO = "demo"
TIME_SCALE = 60.0
POLL_INTERVAL = 0.25
STDOUT_SINK = "demo-stdout"


def run_demo(extra_sinks: list[str], timeout: float = 55.0, out: TextIO | None = None) -> int:
    """Run the built-in `demo` scenario; 0 when every kind of CloudEvent was delivered."""
    from ..simulator import SimulatorServer, load_scenario

    out = out or sys.stdout
    setup_logging("text", "warning")
    sinks: list[dict[str, Any]] = [
        {"type": "stdout", "format": "pretty", "explain": True, "name": STDOUT_SINK}
    ]
    sinks += [cfg.parse_sink_spec(s, f"--sink {s!r}") for s in extra_sinks]
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="se-forwarder-demo-") as tmp, SimulatorServer(
        time_scale=TIME_SCALE, scenario=SCENARIO
    ) as sim:
        settings = cfg.from_dict({
            "imds": {"url": sim.url, "poll_interval": POLL_INTERVAL},
            "state": {"dir": tmp},
            "sinks": sinks,
        })
        _say(out, _header(len(load_scenario(SCENARIO).events), sim.url))
        agent = Agent(settings, stdout=out)
        result: list[int] = []
        thread = threading.Thread(target=lambda: result.append(agent.run()), daemon=True)
        thread.start()
        try:
            finished = _wait_until_done(sim, Path(tmp), [s.name for s in settings.sinks],
                                        began + timeout, thread)
        finally:
            agent.stop.set()
            thread.join(5.0)
        stories, counts = _stories(Path(tmp))
    extra = [s.name for s in settings.sinks if s.name != STDOUT_SINK]
    _say(out, _summary(stories, counts, extra))
    if not finished:
        _say(out, f"The demo did not finish within {timeout:g} s (a busy machine?); exit status 1.")
        return 1
    missing = [s for s in STATES if not counts.get(s)]
    if missing:
        _say(out, f"Missing CloudEvent types: {', '.join(missing)}; exit status 1.")
        return 1
    _say(out, _try_next(_path_hint()))
    return 0


def _say(out: TextIO, text: str) -> None:
    out.write(text + "\n")
    out.flush()


def _header(events: int, url: str) -> str:
    first = (f"se-forwarder demo: a simulated Azure VM gets {events} maintenance events, at "
             f"{TIME_SCALE:g}x speed (1 min = 1 s).")
    rest = (f"The agent polls the simulated IMDS at {url} every {POLL_INTERVAL:g} s, approves by "
            "the default policy (the documented sample's) and prints each CloudEvent it delivers; "
            "then a summary (after about 10 s).")
    return "\n".join([*textwrap.wrap(first, WIDTH), *textwrap.wrap(rest, WIDTH), ""])


def _wait_until_done(sim: object, state_dir: Path, sinks: list[str], deadline: float,
                     agent_thread: threading.Thread) -> bool:
    quiet_since: float | None = None
    while time.monotonic() < deadline and agent_thread.is_alive():
        time.sleep(0.25)
        if not (sim.sim.scenario_done() and not sim.sim.document()["Events"]):  # type: ignore[attr-defined]
            quiet_since = None
            continue
        with Outbox(state_dir) as box:
            backlog = sum(box.sink_status(n).backlog for n in sinks)
            seen_empty = (box.previous_document() or None) is not None and not (
                box.previous_document().events  # type: ignore[union-attr]
            )
        if backlog == 0 and seen_empty:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 0.5:
                return True
    return False


def _stories(state_dir: Path) -> tuple[list[tuple[str, str, str]], Counter[str]]:
    """(EventType, short EventId, what happened) per event in order of appearance, and counts."""
    with Outbox(state_dir) as box:
        stored = box.all_events()
    counts = Counter(e.state for e in stored)
    by_event: dict[str, list[dict[str, Any]]] = {}
    for e in stored:
        by_event.setdefault(e.event_id, []).append(e.as_dict())
    stories = []
    for event_id, events in by_event.items():
        kind = str(events[0].get("eventtype") or "-")
        stories.append((kind, event_id[:ID_WIDTH], _story(events)))
    return stories, counts


def _story(events: list[dict[str, Any]]) -> str:
    words: list[str] = []
    seen_scheduled = False
    for event in events:
        state = str(event.get("type", "")).rsplit(".", 1)[-1]
        data = event.get("data") or {}
        inferred = " (inferred)" if data.get("Inferred") else ""
        if state == "scheduled":
            seen_scheduled = True
            words.append("announced")
        elif state == "approved":
            words.append(f"approved by {approved_by_words(str(data.get('ApprovedBy') or 'agent'))}")
        elif state == "started" and not seen_scheduled and not inferred:
            words.append("started without notice (hardware failure)")
        elif state == "canceled":
            if seen_scheduled and not any("approved" in w for w in words):
                words.append("no policy rule approved it")
            words.append("canceled by Azure before it started")
        else:
            words.append(state + inferred)
    return ", ".join(words)


def _summary(stories: list[tuple[str, str, str]], counts: Counter[str], extra_sinks: list[str]) -> str:
    total = sum(counts.values())
    by_type = ", ".join(f"{counts.get(s, 0)} {s}" for s in STATES)
    lines = ["", f"summary: {total} CloudEvents ({by_type})"]
    for kind, short_id, story in stories:
        lines += textwrap.wrap(f"{kind:<9} {short_id}  {story}", WIDTH, initial_indent="  ",
                               subsequent_indent=" " * 22)
    if extra_sinks:
        lines += textwrap.wrap(f"The same CloudEvents went to {', '.join(extra_sinks)}, as JSON.",
                               WIDTH)
    return "\n".join(lines)


def _path_hint() -> str | None:
    """Lines that put this se-forwarder on PATH, when typing ``se-forwarder`` would not find it."""
    typed = sys.argv[0] if sys.argv else ""
    if Path(typed).name != "se-forwarder":  # python -m se_forwarder
        return None
    exe = Path(os.path.abspath(typed))
    found = shutil.which("se-forwarder")
    if found and Path(found).resolve() == exe.resolve():
        return None
    activate = exe.parent / "activate"
    if activate.exists():
        return f"  # first, se-forwarder on your PATH:\n  . {_short(activate)}"
    return f"  # first, se-forwarder on your PATH:\n  export PATH=\"{_short(exe.parent)}:$PATH\""


def _short(path: Path) -> str:
    relative = os.path.relpath(path)
    return relative if len(relative) < len(str(path)) else str(path)


def _try_next(path_hint: str | None) -> str:
    cmd = "se-forwarder"
    lines = [
        "",
        "Try next:",
        *([path_hint] if path_hint else []),
        "  # the same CloudEvents as JSON lines, as your own tools would get them",
        f"  {cmd} demo --sink file:/tmp/demo.jsonl",
        "  # your own simulated IMDS in one terminal (--list-scenarios shows the others) ...",
        f"  {cmd} simulate --scenario spot-eviction --time-scale 10",
        "  # ... and the agent against it in another; add --sink webhook:URL to POST each CloudEvent",
        f"  {cmd} run --imds-url http://127.0.0.1:8099 --sink stdout:pretty \\",
        "      --state-dir /tmp/se-state",
        f"  # a fleet: 11 VMs, their agents and the coordinator with its page: {cmd} demo --fleet",
    ]
    return "\n".join(lines)
