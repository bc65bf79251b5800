"""The error family, and how any error is said in one line.

Every error a user can cause is a ``SeForwarderError`` whose message is one line saying what is
wrong and what to do; its ``exit_code`` is the command's exit status. ``describe`` is the line the
CLI prints for any exception. ``one_line``, ``root_cause`` and ``find_cause`` turn the layered,
multi-line errors of HTTP and Azure libraries into something that fits in a log line or a reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TypeVar

E = TypeVar("E", bound=BaseException)
LIMIT = 300
# Lines of SDK error texts after the first that repeat it or add ids, times and payloads.
_TRAILERS = ("Error condition", "Error Description", "Error:", "RequestId:", "Time:", "ErrorCode:",
             "Content:")
_OBJECT_REPR = re.compile(r"<[^>]*>: ")


class SeForwarderError(Exception):
    """Base of the errors the CLI turns into one line and a non-zero exit."""

    exit_code = 1


class ConfigError(SeForwarderError):
    """A configuration key or value (or a command-line option) is wrong; the message names it."""

    exit_code = 2


class StateError(SeForwarderError):
    """The state directory or its database cannot be used safely."""

    exit_code = 3


def describe(exc: BaseException) -> str:
    """The one line the CLI prints for ``exc``: our own message, else the type and a short text."""
    if isinstance(exc, SeForwarderError):
        return one_line(str(exc), limit=2000)
    return f"{type(exc).__name__}: {one_line(exc)}"


def exit_code(exc: BaseException) -> int:
    return exc.exit_code if isinstance(exc, SeForwarderError) else 1


def one_line(what: BaseException | str, limit: int = LIMIT) -> str:
    """``what`` on one line: an OS error's own words (``Connection refused``), otherwise its text
    without object reprs, SDK trailers and repeated lines; cut at ``limit`` characters."""
    if isinstance(what, OSError) and what.strerror:
        return what.strerror
    text = what if isinstance(what, str) else (str(what) or type(what).__name__)
    kept: list[str] = []
    for raw in _OBJECT_REPR.sub("", text).splitlines():
        line = " ".join(raw.split())
        if not line:
            continue
        if kept and (line in kept or line.startswith(_TRAILERS)):
            break
        kept.append(line)
    out = " ".join(kept)
    return out if len(out) <= limit else out[:limit] + "..."


def causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it wraps, outermost first: an SDK's ``inner_exception``, urllib3's
    ``reason``, an exception among the arguments, then ``__cause__`` / ``__context__``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        nxt = getattr(current, "inner_exception", None) or getattr(current, "reason", None)
        if not isinstance(nxt, BaseException):
            nxt = next((a for a in current.args if isinstance(a, BaseException)), None)
        current = nxt or current.__cause__ or current.__context__


def root_cause(exc: BaseException) -> BaseException:
    """The innermost error under the wrappers of requests, urllib3 and azure-core."""
    *_, last = causes(exc)
    return last


def find_cause(exc: BaseException, kind: type[E]) -> E | None:
    """The first ``kind`` among ``exc`` and what it wraps, or None."""
    return next((c for c in causes(exc) if isinstance(c, kind)), None)
