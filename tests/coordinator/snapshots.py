"""A fold's snapshot lines as format 1 wrote them (before VMs were columns): VMs as rows, in the
order a ``columns`` record names, where format 2 writes its ``vm-*`` records."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from se_forwarder.fleet.coordinator.fold.snapshot import BATCH, VM_COLUMNS, encode, lines, vm_row
from se_forwarder.fleet.coordinator.fold.state import FleetState


def format_1(state: FleetState) -> list[list[Any]]:
    """The records of ``state``'s lines as format 1 wrote them."""
    rows = [vm_row(state.vms[k]) for k in sorted(state.vms)]
    records: list[list[Any]] = [["format", 1], ["columns", {"vm": list(VM_COLUMNS)}]]
    for tag, value in (json.loads(line) for line in lines(state)):
        if tag == "vm-shared":  # the first of format 2's VM records
            records += [["vms", rows[start:start + BATCH]] for start in range(0, len(rows), BATCH)]
        elif tag not in ("format", "vm-places", "vm-columns"):
            records.append([tag, value])
    return records


def encoded(records: list[list[Any]]) -> Iterator[bytes]:
    return (encode(record) + b"\n" for record in records)
