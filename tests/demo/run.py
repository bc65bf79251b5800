"""``se-forwarder demo --fleet`` as a subprocess whose output a test reads as it comes."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import requests

from tests.support.paths import ROOT
from tests.support.waiting import wait_for


class DemoRun:
    """The demo started with ``args`` (after ``se-forwarder``); its stdout lines as they come."""

    def __init__(self, *args: str, cwd: Path = ROOT) -> None:
        self.args, self.cwd = args, cwd
        self.lines: list[str] = []
        self.stderr = ""
        self.proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def start(self) -> DemoRun:
        self.proc = subprocess.Popen([sys.executable, "-m", "se_forwarder", *self.args], cwd=self.cwd,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        threading.Thread(target=self._read_err, daemon=True).start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def _read_err(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()

    @property
    def stdout(self) -> str:
        with self._lock:
            return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        """The first match of ``pattern`` (multi-line) in the output, waiting up to ``timeout`` s."""
        def found() -> re.Match[str] | str | None:
            ended = self.proc is not None and self.proc.poll() is not None
            if ended:
                self._reader.join(5)  # everything it printed, read
            match = re.search(pattern, self.stdout, re.M)
            return match or ("ended" if ended else None)

        result = wait_for(found, timeout, f"{pattern!r} in the demo's output")
        if isinstance(result, str):
            assert self.proc is not None
            raise AssertionError(f"the demo ended ({self.proc.returncode}) without {pattern!r}:\n"
                                 f"{self.stdout[-3000:]}\n{self.stderr[-3000:]}")
        return result

    def url(self, label: str) -> str:
        return self.wait_for(rf"^{label}: (http://127\.0\.0\.1:\d+/?)", 60).group(1).rstrip("/")

    def control(self, route: str) -> Any:
        """``GET /control/<route>`` of the demo's simulator."""
        answer = requests.get(f"{self.url('Simulator')}/control/{route}", timeout=10, proxies={"http": ""})
        answer.raise_for_status()
        return answer.json()

    def metrics(self) -> dict[str, dict[str, float]]:
        """The coordinator's ``/metrics`` (served beside its page): sample name -> {the joined
        values of its labels ("" for none): value}."""
        from prometheus_client.parser import text_string_to_metric_families

        answer = requests.get(f"{self.url('Fleet page')}/metrics", timeout=10, proxies={"http": ""})
        answer.raise_for_status()
        out: dict[str, dict[str, float]] = {}
        for family in text_string_to_metric_families(answer.text):
            for sample in family.samples:
                out.setdefault(sample.name, {})[",".join(sample.labels.values())] = sample.value
        return out

    def interrupt(self, timeout: float = 30) -> int:
        """Ctrl-C, as a person at the terminal gives it; the exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
