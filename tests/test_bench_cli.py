"""`python -m bench`: --help without running anything, --only for a subset, and RESULTS.md written
only with --write, naming the machine and the commit."""

from __future__ import annotations

import subprocess
import sys
import time

import bench.__main__ as bench_main
from tests.support.paths import ROOT

RESULTS = ROOT / "bench" / "RESULTS.md"


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def test_help_runs_nothing_and_names_every_benchmark():
    began = time.monotonic()
    result = bench("--help")
    assert result.returncode == 0 and time.monotonic() - began < 10
    assert "--only NAME" in result.stdout and "--write" in result.stdout
    assert all(name in result.stdout for name in bench_main.NAMES)


def test_only_runs_a_subset_prints_machine_and_commit_and_writes_nothing():
    before = RESULTS.read_bytes()
    result = bench("--only", "outbox_throughput")
    assert result.returncode == 0, result.stderr
    assert "| outbox | insert (1000/transaction) |" in result.stdout
    assert "| burst |" not in result.stdout
    assert result.stdout.startswith("Ran on CPython") and "; commit " in result.stdout.splitlines()[0]
    assert RESULTS.read_bytes() == before


def test_write_is_for_a_full_run_and_an_unknown_name_is_refused():
    for args in (["--write", "--only", "burst"], ["--only", "nope"]):
        result = bench(*args)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 2  # usage + error


def test_results_record_the_machine_and_the_commit(tmp_path, monkeypatch):
    assert bench_main.commit() not in ("", "unknown (not a git checkout)")  # this checkout's
    (tmp_path / "bench").mkdir()
    monkeypatch.setattr(bench_main, "ROOT", tmp_path)
    bench_main.write_results("| t |", [("bench/x.py", "figures")], [], 12.0, "a machine; commit abc123")
    text = (tmp_path / "bench" / "RESULTS.md").read_text()
    assert "Produced by `python -m bench --write` in 12 s on a machine; commit abc123, " in text
