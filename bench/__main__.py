"""`python -m bench`: every benchmark in one run; prints a table and writes bench/RESULTS.md.

Figures are measured, not asserted (these machines are shared and noisy); comparisons are made
side by side in the same run and given as ratios.
"""

from __future__ import annotations

import importlib
import platform
import subprocess
import sys
import time

import psutil

from bench.common import ROOT, Row

# Modules with run() -> list[Row]; then standalone scripts whose output is kept verbatim.
MODULES = ["bench.agent_vs_sample", "bench.outbox_throughput", "bench.burst", "bench.footprint"]
SCRIPTS = [
    ["bench/webhook_latency.py", "--poll-interval", "1.0", "--changes", "40", "--backlog", "3000"],
    ["bench/webhook_latency.py", "--poll-interval", "0.2", "--changes", "60", "--backlog", "1000"],
    ["bench/approval_roundtrip.py"],
    ["bench/eventhubs_bench.py"],
]


def main() -> int:
    began = time.monotonic()
    rows: list[Row] = []
    failures: list[str] = []
    for name in MODULES:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        try:
            rows += importlib.import_module(name).run()
        except Exception as exc:  # noqa: BLE001 - one failed benchmark must not hide the others
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
    outputs: list[tuple[str, str]] = []
    for command in SCRIPTS:
        if not (ROOT / command[0]).exists():
            continue
        script = " ".join(command)
        print(f"running {script} ...", file=sys.stderr, flush=True)
        proc = subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
        text = proc.stdout.strip() or proc.stderr.strip()[-2000:]
        outputs.append((script, text if proc.returncode == 0 else f"FAILED:\n{text}"))
    table = render(rows)
    print(table)
    for script, text in outputs:
        print(f"\n## {script}\n{text}")
    write_results(table, outputs, failures, time.monotonic() - began)
    for f in failures:
        print(f"FAILED {f}", file=sys.stderr)
    return 1 if failures else 0


def render(rows: list[Row]) -> str:
    head = "| benchmark | figure | value | target | note |\n|---|---|---|---|---|"
    body = "\n".join(f"| {r.benchmark} | {r.figure} | {r.value} | {r.target} | {r.note} |"
                     for r in rows)
    return f"{head}\n{body}"


def write_results(table: str, outputs: list[tuple[str, str]], failures: list[str],
                  elapsed: float) -> None:
    machine = (f"{platform.python_implementation()} {platform.python_version()}, "
               f"{psutil.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB, "
               f"{platform.platform()}")
    parts = [
        "# Benchmark results",
        "",
        f"Produced by `python -m bench` in {elapsed:.0f} s on {machine}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        table,
    ]
    for script, text in outputs:
        parts += ["", f"## {script}", "", "```", text, "```"]
    if failures:
        parts += ["", "## Failed", ""] + [f"- {f}" for f in failures]
    (ROOT / "bench" / "RESULTS.md").write_text("\n".join(parts) + "\n")


if __name__ == "__main__":
    sys.exit(main())
