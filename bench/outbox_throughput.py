"""Outbox throughput: insert + dedup + mark delivered, in events per second."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.common import Row
from se_forwarder.model import Document
from se_forwarder.outbox import NewEvent, Outbox

PAYLOAD = '{"specversion":"1.0","type":"com.azure.scheduledevents.scheduled","data":{"x":' + (
    '"' + "y" * 900 + '"}}')  # about the size of a real CloudEvent (1 kB)


def run(total: int = 20_000, per_transaction: int = 1_000) -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp:
        box = Outbox(Path(tmp))
        box.register_sinks(["a"])
        events = [NewEvent(f"E{i}/scheduled", f"E{i}", "scheduled", "t", PAYLOAD, time.time())
                  for i in range(total)]
        began = time.perf_counter()
        for i in range(0, total, per_transaction):
            box.record(Document(i), events[i:i + per_transaction])
        inserted = time.perf_counter()
        for i in range(0, total, per_transaction):  # the same transitions again: all deduplicated
            assert box.record(Document(i), events[i:i + per_transaction]) == []
        deduped = time.perf_counter()
        while batch := box.pending("a", 500):
            box.ack("a", [(e.seq, None) for e in batch])
        acked = time.perf_counter()
        small_began = time.perf_counter()
        for i in range(500):  # one transition per transaction, as in normal operation
            box.record(Document(total + i), [NewEvent(f"S{i}/x", f"S{i}", "x", "t", PAYLOAD, 0.0)])
        small = time.perf_counter() - small_began
        box.close()
    end_to_end = total / (acked - began - (deduped - inserted))
    return [
        Row("outbox", f"insert ({per_transaction}/transaction)",
            f"{total / (inserted - began):,.0f} events/s"),
        Row("outbox", "dedup (re-insert, all ignored)", f"{total / (deduped - inserted):,.0f} events/s"),
        Row("outbox", "read + mark delivered (500/batch)", f"{total / (acked - deduped):,.0f} events/s"),
        Row("outbox", "insert + mark delivered, end to end", f"{end_to_end:,.0f} events/s",
            ">= 20,000/s"),
        Row("outbox", "one transition per transaction (fsync each)",
            f"{500 / small:,.0f} transactions/s", "", "synchronous=FULL: each commit is durable"),
    ]


if __name__ == "__main__":
    for row in run():
        print(f"{row.benchmark:<10} {row.figure:<46} {row.value:<24} {row.target}")
