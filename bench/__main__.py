"""`python -m bench`: the benchmarks in one run; prints a table, and with --write records it in
bench/RESULTS.md with the machine and the commit it ran on.

Figures are measured, not asserted (these machines are shared and noisy); comparisons are made
side by side in the same run and given as ratios. `--only NAME...` runs a subset; `--list` names
them all.
"""

from __future__ import annotations

import argparse
import importlib
import platform
import subprocess
import sys
import time
from dataclasses import dataclass

import psutil

from bench.common import ROOT, Row


@dataclass(frozen=True)
class Benchmark:
    name: str
    what: str
    module: str | None = None  # a module with run() -> list[Row]
    commands: tuple[tuple[str, ...], ...] = ()  # or scripts whose output is kept verbatim


BENCHMARKS = (
    Benchmark("agent_vs_sample", "idle poll CPU (whole process, 120 s at the default 1 s) and RSS, "
              "agent vs the documented sample's loop, IMDS without ETag (as documented) and with it",
              module="bench.agent_vs_sample"),
    Benchmark("poll_profile", "CPU of one unchanged poll in process, agent's poller vs the "
              "sample's loop body, and the poll path's profile", module="bench.poll_profile",
              commands=(("-m", "bench.poll_profile", "--polls", "2000"),)),
    Benchmark("outbox_throughput", "outbox inserts, dedup, reads and fsynced commits per second",
              module="bench.outbox_throughput"),
    Benchmark("burst", "a 1,000-event document to delivered (file and batch webhook)",
              module="bench.burst"),
    Benchmark("footprint", "agent RSS with a file sink and with a webhook sink, vs the sample loop",
              module="bench.footprint"),
    Benchmark("health_probes", "what [health] costs an idle agent: CPU, RSS and polls with an HTTP and "
              "a TCP probe every second, beside the same agent without", module="bench.health_probes"),
    Benchmark("imports", "what each import adds to RSS, in the order an agent loads them",
              commands=(("-m", "bench.import_costs"),)),
    Benchmark("webhook_latency", "IMDS change -> webhook 200 latency (poll 1 s and 0.2 s, IMDS "
              "without and with ETag), throughput",
              commands=(
                  ("bench/webhook_latency.py", "--poll-interval", "1.0", "--changes", "40",
                   "--backlog", "3000"),
                  ("bench/webhook_latency.py", "--poll-interval", "0.2", "--changes", "60",
                   "--backlog", "1000"),
              )),
    Benchmark("approval_roundtrip", "signed queue message -> IMDS POST, through Azurite",
              commands=(("bench/approval_roundtrip.py",),)),
    Benchmark("eventhubs", "Event Hubs throughput to the local broker, and RSS",
              commands=(("bench/eventhubs_bench.py",),)),
    Benchmark("fleet_fanin", "50 agent processes (one per simulated VM) -> one Event Hubs broker "
              "with heartbeats: CPU, RSS, burst events/s, change -> broker p99",
              module="bench.fleet_fanin"),
    Benchmark("coordinator_fold", "coordinator core at 10,000 VMs: fold rate, decision pass, snapshot, RSS",
              commands=(("bench/coordinator_fold.py",),)),
    Benchmark("coordinator_gates", "coordinator decision pass at 10,000 VMs with gates and maintenance "
              "windows beside the same pass without", commands=(("bench/coordinator_gates.py",),)),
    Benchmark("coordinator_verified", "coordinator edge at 10,000 VMs: signed reports verified by the "
              "verifier's workers and folded per second beside json.loads, a bare verification loop "
              "(OpenSSL, libsodium) and the serial edge; one registration's cost",
              commands=(("bench/coordinator_verified.py",),)),
    Benchmark("coordinator_cold_start", "coordinator cold start and snapshot start of 100,000 VMs through "
              "the broker (a registration and a heartbeat each on the hub): seconds to acting and to every "
              "VM known, beside a bare receive loop over the same hub",
              commands=(("bench/coordinator_cold_start.py",),)),
    Benchmark("coordinator_forgery", "forged registrations (issue 31): each kind's cost beside an honest "
              "one, the fold's lag under a chain-bomb flood, the held pool's memory at its caps",
              commands=(("bench/coordinator_forgery.py",),)),
    Benchmark("coordinator_shards", "a shard on a hub it shares, 10,000 VMs in two subscriptions: another "
              "shard's report dropped and its own verified and folded, beside json.loads of the same texts",
              commands=(("bench/coordinator_shards.py",),)),
    Benchmark("ed25519_impls", "Ed25519 implementations (cryptography, PyNaCl, pysodium, PyCryptodome, "
              "ed25519-zebra) verifying the same signed reports on one thread, beside json.loads of "
              "their texts; key loading and batch", commands=(("bench/ed25519_impls.py",),)),
    Benchmark("coordinator_flood", "coordinator core at 10,000 VMs with and without a flood from one VM "
              "(issue 22): RSS and decision pass p99 side by side",
              commands=(("bench/coordinator_flood.py",),)),
    Benchmark("coordinator_e2e", "coordinator service, 10,000 VMs through the broker: ingest, "
              "hub -> queue latency, RSS", commands=(("bench/coordinator_e2e.py",),)),
    Benchmark("coordinator_outage", "coordinator through a 30 s Event Hub outage: hub back -> reader "
              "back, caught up, decision and queue message, beside the decision with the hub up",
              commands=(("bench/coordinator_outage.py",),)),
    Benchmark("fleet_page", "the fleet page at 1,000 and 10,000 VMs: document size, build time, "
              "first render and polls in headless Chromium", commands=(("bench/fleet_page.py",),)),
)
NAMES = tuple(b.name for b in BENCHMARKS)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Run the benchmarks (about 17 minutes for all of them on 2 cores) and print "
                    "a table of figures, each next to its baseline measured in the same run where "
                    "one exists. Nothing is written unless --write is given.",
        epilog="benchmarks: " + ", ".join(NAMES),
    )
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=NAMES,
                        help="run only these benchmarks (see --list)")
    parser.add_argument("--list", action="store_true", help="name and describe the benchmarks, then exit")
    parser.add_argument("--write", action="store_true",
                        help="record the results in bench/RESULTS.md (a full run only)")
    args = parser.parse_args(argv)
    if args.write and args.only:
        parser.error("--write records a full run; leave out --only")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        width = max(map(len, NAMES))
        for b in BENCHMARKS:
            print(f"{b.name:<{width}}  {b.what}")
        return 0
    chosen = [b for b in BENCHMARKS if not args.only or b.name in args.only]
    where = f"{machine()}; commit {commit()}"
    print(f"running {', '.join(b.name for b in chosen)} on {where}", file=sys.stderr, flush=True)
    began = time.monotonic()
    rows: list[Row] = []
    outputs: list[tuple[str, str]] = []
    failures: list[str] = []
    for bench in chosen:
        if bench.module:
            print(f"running {bench.module} ...", file=sys.stderr, flush=True)
            try:
                rows += importlib.import_module(bench.module).run()
            except Exception as exc:  # noqa: BLE001 - one failed benchmark must not hide the others
                failures.append(f"{bench.name}: {type(exc).__name__}: {exc}")
        for command in bench.commands:
            script = " ".join(command)
            if command[0] != "-m" and not (ROOT / command[0]).exists():
                failures.append(f"{script}: {command[0]} does not exist")
                continue
            print(f"running {script} ...", file=sys.stderr, flush=True)
            proc = subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True,
                                  text=True, timeout=300)
            text = proc.stdout.strip() or proc.stderr.strip()[-2000:]
            outputs.append((script, text if proc.returncode == 0 else f"FAILED:\n{text}"))
            if proc.returncode != 0:
                failures.append(f"{script}: exit status {proc.returncode}")
    elapsed = time.monotonic() - began
    table = render(rows) if rows else ""
    print(f"Ran on {where} in {elapsed:.0f} s.")
    if table:
        print(table)
    for script, text in outputs:
        print(f"\n## {script}\n{text}")
    if args.write:
        write_results(table, outputs, failures, elapsed, where)
        print(f"\nwrote {(ROOT / 'bench' / 'RESULTS.md').relative_to(ROOT)}", file=sys.stderr)
    for f in failures:
        print(f"FAILED {f}", file=sys.stderr)
    return 1 if failures else 0


def machine() -> str:
    return (f"{platform.python_implementation()} {platform.python_version()}, "
            f"{psutil.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB, "
            f"{platform.platform()}")


def commit() -> str:
    """The checked-out commit, ``+ changes`` when the tree differs from it; ``unknown`` outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return f"{head} + uncommitted changes" if dirty else head


def render(rows: list[Row]) -> str:
    head = ("| benchmark | figure | value | vs baseline (same run) | target | note |\n"
            "|---|---|---|---|---|---|")
    body = "\n".join(f"| {r.benchmark} | {r.figure} | {r.value} | {r.ratio} | {r.target} | {r.note} |"
                      for r in rows)
    return f"{head}\n{body}"


def write_results(table: str, outputs: list[tuple[str, str]], failures: list[str],
                  elapsed: float, where: str) -> None:
    parts = [
        "# Benchmark results",
        "",
        f"Produced by `python -m bench --write` in {elapsed:.0f} s on {where}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        table,
    ]
    for script, text in outputs:
        parts += ["", f"## {script}", "", "```", text, "```"]
    if failures:
        parts += ["", "## Failed", ""] + [f"- {f}" for f in failures]
    findings = ROOT / "bench" / "findings.md"
    if findings.exists():  # the reading of the figures: profile findings, fleet arithmetic
        parts += ["", findings.read_text().strip()]
    (ROOT / "bench" / "RESULTS.md").write_text("\n".join(parts) + "\n")


if __name__ == "__main__":
    sys.exit(main())
