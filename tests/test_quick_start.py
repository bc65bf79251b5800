"""The README's quick start, run as a new user runs it: a fresh clone, PATH holding only /usr/bin and
/bin (the distribution's externally managed Python, no pyenv, no venv active), the one command
from the README. It must install what it needs into the clone and end with the demo's summary.

The second test does the same on a Python without ensurepip, as on stock Debian/Ubuntu images
without the python3-venv package (ensurepip and Debian's bundled wheels are hidden in a private
mount namespace; needs root, as CI has).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import ROOT

pytestmark = pytest.mark.slow
SYSTEM_PYTHON = Path("/usr/bin/python3")


def quick_start_line() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("\n## Quick start\n"):]
    block = re.search(r"```(?:sh|bash)\n(.*?)```", section, re.S)
    assert block, "no command block under ## Quick start"
    [line] = [ln for ln in block.group(1).splitlines() if ln.strip() and not ln.startswith("#")]
    return line


def user_env() -> dict[str, str]:
    """This user's environment with only /usr/bin and /bin on PATH and no Python set up."""
    dropped = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYENV_VERSION", "PYENV_ROOT", "CONDA_PREFIX")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["PATH"] = "/usr/bin:/bin"
    return env


@pytest.fixture
def fresh_clone(tmp_path):
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


def assert_demo_ran(result: subprocess.CompletedProcess[str], clone: Path) -> None:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert re.search(r"^summary: 12 CloudEvents in \d+ s \(3 scheduled, 2 approved, 3 started, "
                     r"3 completed, 1 canceled\)$", result.stdout, re.M), result.stdout
    assert "Try next:" in result.stdout
    assert (clone / ".venv" / "bin" / "se-forwarder").exists()
    home = (clone / ".venv" / "pyvenv.cfg").read_text()
    assert "home = /usr/bin" in home  # the distribution's Python, not one from elsewhere


@needs_system_python
def test_readme_quick_start_in_a_fresh_clone_with_the_distributions_python(fresh_clone):
    line = quick_start_line()
    assert line == "./scripts/demo"
    result = subprocess.run(["bash", "-c", line], cwd=fresh_clone, env=user_env(),
                            capture_output=True, text=True, timeout=600)
    assert_demo_ran(result, fresh_clone)


@needs_system_python
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="hiding ensurepip needs root and unshare")
def test_readme_quick_start_without_python3_venv(fresh_clone, tmp_path):
    stdlib = subprocess.run(
        [str(SYSTEM_PYTHON), "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    empty = tmp_path / "empty"
    empty.mkdir()
    hide = [f"mount --bind {empty} {path}"
            for path in (f"{stdlib}/ensurepip", "/usr/share/python-wheels") if Path(path).is_dir()]
    script = " && ".join([*hide, quick_start_line()])
    result = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                            cwd=fresh_clone, env=user_env(), capture_output=True, text=True,
                            timeout=600)
    assert "has no ensurepip" in result.stderr and "python3-venv" in result.stderr
    assert_demo_ran(result, fresh_clone)
