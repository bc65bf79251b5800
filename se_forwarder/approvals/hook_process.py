"""One hook command as a process: what it may see, how much of its output is kept, how it ends.

- Environment: an allow-list, never the agent's whole environment (the env file holds
  ``AZURE_CLIENT_SECRET``, connection strings and keys). A hook gets ``PATH``, ``LANG``, ``LC_*``,
  ``TZ``, the ``SE_*`` variables and the names listed in ``[approvals.hooks] env``; a variable the
  configuration reads a secret from is never passed, listed or not.
- Output: stdout and stderr go through a pipe into a spool of ``SPOOL_BYTES``; beyond that the
  oldest bytes are dropped (the end of a failing hook's output says most) and the run's detail and
  the log say how many. A hook cannot fill the disk or the agent's memory by printing.
- End: at its timeout, SIGTERM to its process group, SIGKILL ``KILL_GRACE`` seconds later; when the
  agent stops, SIGTERM at once and SIGKILL after the stop grace (``stop_grace``, default
  ``DEFAULT_STOP_GRACE``: the systemd unit's TimeoutStopSec of 20 s minus a margin for the rest of
  the shutdown).
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from ..errors import ConfigError

ALWAYS = ("PATH", "LANG", "TZ")
ALWAYS_PREFIXES = ("LC_", "SE_")
SPOOL_BYTES = 64 * 1024
KILL_GRACE = 5.0  # seconds between SIGTERM and SIGKILL of a timed-out hook
DEFAULT_STOP_GRACE = 15.0  # seconds a running hook gets when the agent stops
MAX_STOP_GRACE = 3600.0
DRAIN_SECONDS = 1.0  # output still read after the command exited (a child may hold the pipe)
CHUNK = 65536
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

SUCCEEDED, FAILED, TIMED_OUT, INTERRUPTED = "succeeded", "failed", "timed-out", "interrupted"


def validate_settings(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``env`` (names of variables passed to hooks besides the defaults) and ``stop_grace``."""
    out: dict[str, Any] = {}
    if "env" in raw:
        names = raw["env"]
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ConfigError(f"{where}.env: must be a list of environment variable names, "
                              'e.g. ["HOME", "KUBECONFIG"]')
        for name in names:
            if not _NAME.match(name):
                raise ConfigError(f"{where}.env: {name!r} is not an environment variable name "
                                  "(letters, digits and _, not starting with a digit; no =VALUE)")
        out["env"] = list(dict.fromkeys(names))
    if "stop_grace" in raw:
        grace = raw["stop_grace"]
        if isinstance(grace, bool) or not isinstance(grace, int | float) or not (
                0 <= grace <= MAX_STOP_GRACE):
            raise ConfigError(f"{where}.stop_grace: must be a number of seconds from 0 to "
                              f"{MAX_STOP_GRACE:g} (keep it below the unit's TimeoutStopSec)")
        out["stop_grace"] = float(grace)
    return out


def environment(source: Mapping[str, str], allowed: Iterable[str], secrets: Iterable[str],
                own: Mapping[str, str]) -> dict[str, str]:
    """A hook's environment: the allow-listed part of ``source`` without ``secrets``, plus ``own``
    (the hook's ``SE_*`` variables, which win)."""
    extra, denied = set(allowed), set(secrets)
    env = {k: v for k, v in source.items()
           if k not in denied and (k in ALWAYS or k in extra or k.startswith(ALWAYS_PREFIXES))}
    env.update(own)
    return env


class Spool:
    """The last ``limit`` bytes written, and how many were dropped before them."""

    def __init__(self, limit: int = SPOOL_BYTES) -> None:
        self.limit = limit
        self._buf = bytearray()
        self.dropped = 0

    def write(self, data: bytes) -> None:
        self._buf += data
        excess = len(self._buf) - self.limit
        if excess > 0:
            del self._buf[:excess]
            self.dropped += excess

    def text(self) -> str:
        data = bytes(self._buf)
        if self.dropped:  # the first line is probably cut: start at the next whole line
            cut = data.find(b"\n")
            data = data[cut + 1:] if cut >= 0 else data
        return data.decode("utf-8", "replace")

    def note(self) -> str:
        """``; N bytes of output dropped ...`` when the spool overflowed, else ""."""
        if not self.dropped:
            return ""
        return (f"; {self.dropped} bytes of output dropped (only the last {self.limit} bytes are "
                "kept)")


@dataclass
class Outcome:
    state: str
    exit_code: int | None
    detail: str
    spool: Spool = field(default_factory=Spool)


class Processes:
    """The hook commands running now, so that a stopping agent can end them all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[int, subprocess.Popen[bytes]] = {}
        self.stopping = False

    def spawn(self, command: Sequence[str], stdin: IO[bytes],
              env: Mapping[str, str]) -> subprocess.Popen[bytes] | None:
        """Start ``command`` in its own process group; None once the agent is stopping."""
        with self._lock:
            if self.stopping:
                return None
            proc = subprocess.Popen(
                list(command), stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                env=dict(env), start_new_session=os.name == "posix", close_fds=True,
            )
            self._running[proc.pid] = proc
            return proc

    def forget(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._running.pop(proc.pid, None)

    def terminate(self) -> int:
        """No new commands from now on; SIGTERM to every running one's group. How many ran."""
        with self._lock:
            self.stopping = True
            running = list(self._running.values())
        for proc in running:
            _signal(proc, signal.SIGTERM)
        return len(running)

    def kill_after(self, deadline: float) -> list[int]:
        """Wait until every command exited or ``deadline`` (monotonic), then SIGKILL whatever is
        left of their groups; the pids that had to be killed."""
        with self._lock:
            running = list(self._running.values())
        killed = []
        for proc in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
            if proc.poll() is None:
                killed.append(proc.pid)
            _signal(proc, signal.SIGKILL)  # the leader's children too, whether or not it obeyed
        return killed


def run(processes: Processes, command: Sequence[str], stdin: IO[bytes], env: Mapping[str, str],
        timeout: float) -> Outcome:
    """Run ``command`` to its end: exit, ``timeout`` (TERM, KILL_GRACE, KILL) or the agent's stop."""
    spool = Spool()
    try:
        proc = processes.spawn(command, stdin, env)
    except OSError as exc:
        return Outcome(FAILED, None, f"cannot run {command[0]}: {exc.strerror or exc}", spool)
    if proc is None:
        return Outcome(INTERRUPTED, None, "interrupted: the agent was stopping; not started", spool)
    try:
        assert proc.stdout is not None
        finished = _pump(proc, proc.stdout, spool, time.monotonic() + timeout)
        if not finished:
            _signal(proc, signal.SIGTERM)
            _pump(proc, proc.stdout, spool, time.monotonic() + KILL_GRACE)
            _signal(proc, signal.SIGKILL)  # nothing of its group may outlive the timeout
            proc.wait()
            if not processes.stopping:
                return Outcome(TIMED_OUT, None, f"timed out after {timeout:g} s (killed)", spool)
        code = proc.wait()
    except BaseException:
        _signal(proc, signal.SIGKILL)  # never leave a hook running unwatched
        proc.wait()
        raise
    finally:
        processes.forget(proc)
        if proc.stdout is not None:
            proc.stdout.close()
    if processes.stopping:
        how = f"exit code {code}" if code >= 0 else f"signal {-code}"
        return Outcome(INTERRUPTED, code, f"interrupted: the agent stopped while the hook ran "
                       f"({how}); it is not run again", spool)
    return Outcome(SUCCEEDED if code == 0 else FAILED, code, f"exit code {code}", spool)


def _pump(proc: subprocess.Popen[bytes], pipe: IO[bytes], spool: Spool, deadline: float) -> bool:
    """Read output into ``spool`` until the command exited (True) or ``deadline`` (False)."""
    if os.name != "posix":  # no select() on Windows pipes: a reader thread
        return _pump_with_thread(proc, pipe, spool, deadline)
    fd = pipe.fileno()
    open_pipe = not pipe.closed
    exited_at: float | None = None
    with selectors.DefaultSelector() as sel:
        if open_pipe:
            sel.register(fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if proc.poll() is not None:
                exited_at = exited_at or now
                if not open_pipe or now - exited_at >= DRAIN_SECONDS:
                    return True
            elif now >= deadline:
                return False
            if not open_pipe:
                time.sleep(min(0.1, max(0.0, deadline - now)))
                continue
            if sel.select(min(0.2, max(0.0, deadline - now))):
                data = os.read(fd, CHUNK)
                if data:
                    spool.write(data)
                else:
                    sel.unregister(fd)
                    open_pipe = False
                    pipe.close()


def _pump_with_thread(proc: subprocess.Popen[bytes], pipe: IO[bytes], spool: Spool,
                      deadline: float) -> bool:
    lock = threading.Lock()

    def read() -> None:
        for data in iter(lambda: pipe.read1(CHUNK), b""):  # type: ignore[attr-defined]
            with lock:
                spool.write(data)

    reader = threading.Thread(target=read, name="hook-output", daemon=True)
    reader.start()
    try:
        proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return False
    reader.join(DRAIN_SECONDS)
    return True


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    """``sig`` to the command's process group (POSIX), or to the command (elsewhere)."""
    if os.name == "posix":
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
    elif proc.poll() is None:
        with contextlib.suppress(OSError):
            proc.kill()  # Windows has no SIGTERM for a console process: TerminateProcess
