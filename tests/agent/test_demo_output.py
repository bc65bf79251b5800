"""`se-forwarder demo` as a stranger sees it: a header saying what is simulated and how fast,
columns with their meaning, each kind of CloudEvent explained once, a summary of what happened and
what to try next; every line within 100 columns; and the README shows a real run of it."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections import Counter

import pytest

from tests.support.paths import ROOT

WIDTH = 100


@pytest.fixture(scope="module")
def demo() -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "se_forwarder", "demo"], capture_output=True,
                            text=True, timeout=90, cwd=ROOT)
    return result, time.monotonic() - began


def test_demo_exits_0_within_a_minute(demo):
    result, took = demo
    assert result.returncode == 0, result.stdout + result.stderr
    assert took < 60
    assert result.stderr == ""


def test_every_line_fits_in_100_columns(demo):
    lines = demo[0].stdout.splitlines()
    assert max(len(line) for line in lines) <= WIDTH


def test_header_says_what_is_simulated_and_how_fast(demo):
    first = demo[0].stdout.splitlines()[0]
    assert first.startswith("se-forwarder demo: a simulated Azure VM gets 4 maintenance events")
    assert "60x speed (1 min = 1 s)" in first


def test_columns_have_headers_and_a_legend(demo):
    out = demo[0].stdout
    assert re.search(r"^TIME +CLOUDEVENT +EVENT +EVENT ID +SOURCE +INC +DETAILS$", out, re.M)
    assert "SOURCE\nwho asked (Platform = Azure, User = you)" in out or \
        "SOURCE who asked (Platform = Azure, User = you)" in out
    assert "DocumentIncarnation" in out


@pytest.mark.parametrize("explanation", [
    "scheduled: Azure announced maintenance; it starts at NotBefore, or sooner if approved",
    "approved by policy sample-freeze: Freezes under 9 s are approved at once",
    "approved by policy sample-user: what a user asked for is approved at once",
    "started: the maintenance is under way (approved, or NotBefore passed)",
    "hardware failure: Azure starts it without notice",
    "completed: the maintenance is over and Azure removed the event",
    "canceled: Azure withdrew it before it started",
    "recovered: this VM is back after the event (probes passed, recover hook done, if any)",
])
def test_each_kind_is_explained_once_right_after_its_first_appearance(demo, explanation):
    lines = demo[0].stdout.splitlines()
    [at] = [i for i, line in enumerate(lines) if line.strip() == f"^ {explanation}"]
    assert re.match(r"\d\d:\d\d:\d\d  ", lines[at - 1])


def test_the_hardware_failure_line_says_no_notice(demo):
    [line] = [line for line in demo[0].stdout.splitlines() if line.endswith("no notice")]
    assert line.split()[1:4] == ["started", "Reboot", line.split()[3]]


def test_summary_says_what_happened_and_what_to_try_next(demo):
    out = demo[0].stdout
    summary = out[out.index("\nsummary: "):]
    assert re.search(r"summary: 15 CloudEvents \(3 scheduled, 2 approved, 3 started, "
                     r"3 completed, 3 recovered, 1 canceled\)", summary)
    assert re.search(r"Freeze +\w{8}  announced, approved by policy sample-freeze, started, completed, "
                     r"recovered", summary)
    assert re.search(r"Reboot +\w{8}  started without notice \(hardware failure\), completed, recovered",
                     summary)
    assert re.search(r"Redeploy +\w{8}  announced, no policy rule approved it, canceled by Azure "
                     r"before it started", summary)
    tries = summary[summary.index("Try next:"):]
    assert "simulate --scenario spot-eviction" in tries
    assert "run --imds-url http://127.0.0.1:8099 --sink stdout:pretty" in tries
    assert "--sink webhook:URL" in tries and "fleet" in tries


def _normalised(lines: list[str]) -> Counter[str]:
    """Lines with what differs from run to run (times, ids, ports, counts of seconds) masked."""
    out = []
    for line in lines:
        line = re.sub(r"\d\d:\d\d:\d\d", "HH:MM:SS", line)
        line = re.sub(r"\b[0-9A-F]{8}\b", "<ID>", line)
        line = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", line)
        line = re.sub(r"\(in \d+ s\)", "(in N s)", line)
        line = re.sub(r"back \d+ s after", "back N s after", line)
        # DocumentIncarnation: one more or less when the simulator's two changes land in one poll
        line = re.sub(r"^(HH:MM:SS  \S+ +\S+ +<ID>  \S+) +\d+", r"\1 INC", line)
        if line in ("  # first, se-forwarder on your PATH:",) or line.startswith(("  . ", "  export PATH=")):
            continue  # shown when se-forwarder is not on PATH (a run from ./scripts/demo)
        out.append(line.rstrip())
    return Counter(out)


def test_readme_shows_a_real_run_of_the_demo_within_100_columns(demo):
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```text\n(se-forwarder demo: .*?)```", readme, re.S)
    assert block, "README has no demo output block"
    shown = block.group(1).splitlines()
    assert max(len(line) for line in shown) <= WIDTH
    assert _normalised(shown) == _normalised(demo[0].stdout.splitlines())
