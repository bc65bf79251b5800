"""The README's second quick-start command, as a new user runs it: ``./scripts/demo --fleet`` in a
fresh clone with the distribution's Python (PATH holding only /usr/bin and /bin). It installs the
base package and what the ``fleet`` extra needs into the clone's .venv, runs the fleet demo, and the
demo ends by itself with exit 0 and its summary, whose numbers come from the simulator's own record
(tests/demo/test_fleet_demo.py checks them against that record), with every VM registered and no
report refused by the coordinator.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.support import quick_start
from tests.support.quick_start import needs_system_python, user_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture
def fresh_clone(tmp_path):
    yield from quick_start.fresh_clone(tmp_path)


def fleet_line() -> str:
    [line] = [ln for block in quick_start.quick_start_blocks() for ln in block if "--fleet" in ln]
    return line


@needs_system_python
def test_readme_fleet_demo_in_a_fresh_clone_with_the_distributions_python(fresh_clone):
    line = fleet_line()
    assert line == "./scripts/demo --fleet"
    result = subprocess.run(["bash", "-c", line], cwd=fresh_clone, env=user_env(), capture_output=True,
                            text=True, timeout=840)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert re.match(r"Fleet page: http://127\.0\.0\.1:\d+/ ", out)
    text = " ".join(out[out.index("\nsummary, from the simulator's record"):].split())
    assert re.search(r"web The 6 VMs of the availability set were rebooted one at a time in \d+ s of demo "
                     r"time, each on a StartRequests from its own VM", text), text
    assert re.search(r"api The 4 VMs of the scale set \(zones 1 and 2\) were redeployed one at a time", text)
    assert "Never more than 1 VM down at once in a group or a zone" in text
    assert "(11 of 11 VMs registered), and refused 0." in text  # the rollout went through the trust edge
    assert "installing se-forwarder with its fleet extra" in result.stderr
    quick_start.assert_venv_of_the_system_python(fresh_clone)
