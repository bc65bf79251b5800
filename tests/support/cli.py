"""The command lines as a user runs them: ``se-forwarder`` and the simulator's own command."""

from __future__ import annotations

import os
import subprocess
import sys

from .paths import ROOT


def cli(*args: str, env: dict[str, str] | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``se-forwarder ARGS`` run to its end from the repository, ``env`` added to the environment."""
    return subprocess.run([sys.executable, "-m", "se_forwarder", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def simulator_env() -> dict[str, str]:
    """The environment for the simulator's command, with the repository on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def simulator_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """``python -m se_forwarder.simulator ARGS`` run to its end (--list-scenarios, bad input)."""
    return subprocess.run([sys.executable, "-m", "se_forwarder.simulator", *args], capture_output=True,
                          text=True, timeout=timeout, env=simulator_env(), cwd=ROOT)
