"""The README's quick start as a new user runs it: a fresh clone, PATH holding only /usr/bin and
/bin (the distribution's externally managed Python, no pyenv, no venv active)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import ROOT

SYSTEM_PYTHON = Path("/usr/bin/python3")


def quick_start_blocks() -> list[list[str]]:
    """The command lines (comments left out) of each shell block under ## Quick start, in order."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("\n## Quick start\n"):]
    section = section[:section.index("\n## ", 1)]
    blocks = re.findall(r"```(?:sh|bash)\n(.*?)```", section, re.S)
    assert blocks, "no command block under ## Quick start"
    return [[ln for ln in b.splitlines() if ln.strip() and not ln.startswith("#")] for b in blocks]


def user_env() -> dict[str, str]:
    """This user's environment with only /usr/bin and /bin on PATH and no Python set up."""
    dropped = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYENV_VERSION", "PYENV_ROOT", "CONDA_PREFIX")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["PATH"] = "/usr/bin:/bin"
    return env


def fresh_clone(tmp_path: Path) -> Iterator[Path]:
    """A clone of this checkout's HEAD (body of a fixture: yields the clone, removes it after)."""
    clone = tmp_path / "se-forwarder"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "checkout", "--quiet", head], cwd=clone, check=True)
    yield clone
    shutil.rmtree(clone, ignore_errors=True)


def system_python_is_usable() -> bool:
    if not SYSTEM_PYTHON.exists():
        return False
    check = "import sys; sys.exit(sys.version_info < (3, 11))"
    return subprocess.run([str(SYSTEM_PYTHON), "-c", check]).returncode == 0


needs_system_python = pytest.mark.skipif(not system_python_is_usable(),
                                         reason="no /usr/bin/python3 >= 3.11 on this machine")


def assert_venv_of_the_system_python(clone: Path) -> None:
    assert (clone / ".venv" / "bin" / "se-forwarder").exists()
    home = (clone / ".venv" / "pyvenv.cfg").read_text()
    assert "home = /usr/bin" in home  # the distribution's Python, not one from elsewhere
