"""file sink: one structured CloudEvent JSON per line, appended, fsynced, rotated by size.

Delivery is in outbox order, so the events written but not yet acknowledged are always the first
ones of the backlog the sink is offered next. Three things make this sink exactly-once:

- after a crash, the sink reads the tail of its file once at start and skips the events it finds;
- while running, it remembers the ids of the last batch it wrote: when their acknowledgement did
  not reach the outbox (its disk full, its database locked), the batch comes again and is skipped;
- a write that fails (this file's disk full) is cut back to the file's size before it, so no torn
  line is left behind, and the retry writes whole lines.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, one_line
from ..validation import as_bool, as_int, as_str, no_unknown
from .base import Delivered, DeliveryReport, Outcome, Retry, SinkOptions, StoredEvent, sink_name

TAIL_BYTES = 512 * 1024


@dataclass(frozen=True, kw_only=True)
class FileOptions(SinkOptions):
    """One ``[[sinks]] type = "file"`` table, checked."""

    path: str
    max_bytes: int = 100 * 1024 * 1024  # rotate when the file would grow past this
    keep: int = 5  # rotated files kept
    fsync: bool = True

    @classmethod
    def parse(cls, table: Mapping[str, Any], where: str) -> FileOptions:
        no_unknown(table, where, ("name", "path", "max_bytes", "keep", "fsync"))
        name = sink_name(table, where)
        if "path" not in table:
            raise ConfigError(f"{where}.path: missing (required for this sink type)")
        return cls(
            name=name,
            path=str(Path(as_str(table["path"], f"{where}.path")).expanduser()),
            max_bytes=as_int(table.get("max_bytes", cls.max_bytes), f"{where}.max_bytes", 1024, 2**40),
            keep=as_int(table.get("keep", cls.keep), f"{where}.keep", 0, 1000),
            fsync=as_bool(table.get("fsync", cls.fsync), f"{where}.fsync"),
        )


def validate(options: dict[str, Any], where: str) -> FileOptions:
    return FileOptions.parse(options, where)


def create(name: str, options: FileOptions, ctx: Any) -> FileSink:
    return FileSink(name, Path(options.path), options.max_bytes, options.keep, options.fsync)


class FileSink:
    max_batch = 500

    def __init__(
        self, name: str, path: Path, max_bytes: int = FileOptions.max_bytes,
        keep: int = FileOptions.keep, fsync: bool = FileOptions.fsync,
    ) -> None:
        self.name = name
        self.path = path
        self.max_bytes = max_bytes
        self.keep = keep
        self.fsync = fsync
        self._recent: set[str] | None = None  # ids in the file the outbox may offer again

    def deliver(self, batch: Sequence[StoredEvent]) -> DeliveryReport:
        outcomes: list[Outcome] = []
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self._recent is None:
                self._recent = self._ids_at_tail()
            lines: list[bytes] = []
            for event in batch:
                if event.ce_id in self._recent:
                    outcomes.append(Delivered())  # written already, its acknowledgement lost
                    continue
                lines.append(
                    json.dumps(event.as_dict(), separators=(",", ":")).encode("utf-8") + b"\n"
                )
                outcomes.append(Delivered())
            self._write(lines)
            # Until the outbox moves past them, this batch may be offered again.
            self._recent = {event.ce_id for event in batch}
        except OSError as exc:
            self._recent = None  # lines of this batch may be in the file: skip them on the retry
            return DeliveryReport([Retry(f"cannot write {self.path}: {one_line(exc)}")])
        return DeliveryReport(outcomes)

    def _write(self, lines: list[bytes]) -> None:
        """Append ``lines``, rotating first whenever the next line would pass ``max_bytes``."""
        if not lines:
            return
        size = self.path.stat().st_size if self.path.exists() else 0
        chunk: list[bytes] = []
        chunk_size = 0
        for line in lines:
            if (size or chunk_size) and size + chunk_size + len(line) > self.max_bytes:
                self._append(chunk, size)
                self._rotate()
                size, chunk, chunk_size = 0, [], 0
            chunk.append(line)
            chunk_size += len(line)
        self._append(chunk, size)

    def _append(self, lines: list[bytes], size: int) -> None:
        if not lines:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            good = os.fstat(fd).st_size
            if size and not self._ends_with_newline(fd, size):
                lines = [b"\n", *lines]  # a torn last line (power loss) must not swallow ours
            try:
                _write_all(fd, b"".join(lines))
                if self.fsync:
                    os.fsync(fd)
            except OSError:
                with contextlib.suppress(OSError):  # else the newline guard above still holds
                    os.ftruncate(fd, good)
                raise
        finally:
            os.close(fd)

    @staticmethod
    def _ends_with_newline(fd: int, size: int) -> bool:
        return os.pread(fd, 1, size - 1) == b"\n"

    def _rotate(self) -> None:
        if self.keep == 0:
            self.path.unlink(missing_ok=True)
            return
        for i in range(self.keep - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if older.exists():
                older.replace(self.path.with_name(f"{self.path.name}.{i + 1}"))
        self.path.replace(self.path.with_name(f"{self.path.name}.1"))

    def _ids_at_tail(self) -> set[str]:
        ids: set[str] = set()
        for candidate in (self.path, self.path.with_name(f"{self.path.name}.1")):
            ids |= _tail_ids(candidate)
            if candidate.exists() and candidate.stat().st_size >= TAIL_BYTES:
                break
        return ids

    def check(self) -> str | None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab"):
                pass
        except OSError as exc:
            return f"cannot write {self.path}: {one_line(exc)}"
        return None

    def close(self) -> None:
        pass


def _write_all(fd: int, data: bytes) -> None:
    """os.write may write only part (disk or quota full): go on until all is written or it fails."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, "no space left on device")
        view = view[written:]


def _tail_ids(path: Path) -> set[str]:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            end = fh.tell()
            fh.seek(max(0, end - TAIL_BYTES))
            chunk = fh.read()
    except FileNotFoundError:
        return set()
    ids: set[str] = set()
    for line in chunk.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue  # the first, partial line of the chunk, or a torn write
        if isinstance(value, dict) and isinstance(value.get("id"), str):
            ids.add(value["id"])
    return ids
