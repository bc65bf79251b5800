"""The fleet demo's flags, and what it says when the ``fleet`` extra is missing: one line, exit 2."""

from __future__ import annotations

import subprocess
import sys

from tests.support.cli import cli
from tests.support.paths import ROOT


def test_keep_is_only_for_the_fleet_demo():
    result = cli("demo", "--keep")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["se-forwarder: error: --keep: only with --fleet"]


def test_the_fleet_demo_takes_no_extra_sink():
    result = cli("demo", "--fleet", "--sink", "stdout")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "--sink: not with --fleet" in result.stderr


def test_without_the_fleet_extra_it_says_how_to_get_it_in_one_line():
    hide = ("import sys; sys.modules['uvicorn'] = None; from se_forwarder.cli import main; "
            "sys.argv = ['se-forwarder', 'demo', '--fleet']; main()")
    result = subprocess.run([sys.executable, "-c", hide], cwd=ROOT, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "demo --fleet needs uvicorn: pip install 'se-forwarder[fleet]'" in line
    assert result.stdout == ""
