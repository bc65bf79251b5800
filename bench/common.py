"""Helpers shared by the benchmarks: processes, CPU/RSS readings, percentiles."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil

from tests.support.waiting import wait_for  # noqa: F401 - re-exported for the benchmarks

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Row:
    benchmark: str
    figure: str
    value: str
    target: str = ""
    note: str = ""
    ratio: str = ""  # to the baseline measured in the same run, e.g. "0.41x the sample loop"


def verdict(met: bool) -> str:
    """The note next to a figure with a goal."""
    return "met" if met else "MISSED"


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def agent(args: list[str], env: dict[str, str] | None = None, log: Path | None = None,
          ) -> subprocess.Popen[bytes]:
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - lives with the process
    return subprocess.Popen(
        [sys.executable, "-m", "se_forwarder", "run", *args], cwd=ROOT,
        env={**os.environ, **(env or {})}, stdout=out, stderr=out,
    )


def cpu_seconds(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def cpu_ns(pid: int) -> int:
    """CPU time of every live thread of process ``pid``, in nanoseconds: the scheduler's own
    account (``/proc/PID/task/*/schedstat``), exact where the ``/proc/PID/stat`` figures psutil reads
    are counted in 10 ms ticks. Elsewhere, psutil's figure."""
    tasks = Path(f"/proc/{pid}/task")
    if not tasks.is_dir():
        return round(cpu_seconds(psutil.Process(pid)) * 1e9)
    total = 0
    for task in tasks.iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile
    return total


def threads_of(pid: int) -> set[int]:
    """The ids of the live threads of process ``pid`` (empty where /proc has none)."""
    tasks = Path(f"/proc/{pid}/task")
    return {int(t.name) for t in tasks.iterdir()} if tasks.is_dir() else set()


def rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 1e6


def end(proc: subprocess.Popen[bytes] | None, timeout: float = 40) -> None:
    """SIGTERM a process the benchmark started, SIGKILL it if it does not stop in ``timeout`` s."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()


def print_figures(title: str, rows: list[tuple[str, str]]) -> None:
    """``title``, then one figure a line, names aligned."""
    width = max(len(name) for name, _ in rows)
    print(title)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
