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

from tests.support import quick_start
from tests.support.quick_start import SYSTEM_PYTHON, needs_system_python, user_env

pytestmark = pytest.mark.slow


def quick_start_line() -> str:
    [line] = quick_start.quick_start_blocks()[0]
    return line


@pytest.fixture
def fresh_clone(tmp_path):
    yield from quick_start.fresh_clone(tmp_path)


def assert_demo_ran(result: subprocess.CompletedProcess[str], clone: Path) -> None:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert re.search(r"^summary: 15 CloudEvents \(3 scheduled, 2 approved, 3 started, "
                     r"3 completed, 3 recovered, 1 canceled\)$", result.stdout, re.M), result.stdout
    assert "Try next:" in result.stdout
    quick_start.assert_venv_of_the_system_python(clone)


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
