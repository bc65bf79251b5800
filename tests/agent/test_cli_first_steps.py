"""The CLI as a newcomer meets it: a group without its subcommand shows its help (stdout, exit 0),
help lines are whole, every exit status is in the README, and policy log lines say what matched
and what happens next."""

from __future__ import annotations

import re

import click
import pytest

from se_forwarder import errors
from se_forwarder.cli import main
from tests.support.cli import cli
from tests.support.paths import ROOT


@pytest.mark.parametrize("group", [[], ["fleet"], ["sink"]])
def test_a_group_without_a_subcommand_prints_its_help_on_stdout_with_exit_0(group):
    result = cli(*group)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.startswith(f"Usage: se-forwarder {' '.join(group)}".rstrip() + " [OPTIONS]")
    assert "Commands:" in result.stdout
    assert result.stdout == cli(*group, "--help").stdout


def _commands(group: click.Group, ctx: click.Context, path: list[str]):
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        yield [*path, name], command
        if isinstance(command, click.Group):
            yield from _commands(command, click.Context(command, parent=ctx, info_name=name),
                                 [*path, name])


def _command_rows(help_text: str) -> dict[str, str]:
    """The Commands section of a group's help: name -> its text (wrapped lines joined)."""
    rows: dict[str, str] = {}
    section = help_text.split("\nCommands:\n", 1)[1].split("\n\n", 1)[0]
    name = ""
    for line in section.splitlines():
        if re.match(r"^  \S", line):
            name, _, text = line.strip().partition(" ")
            rows[name] = text.strip()
        else:
            rows[name] += " " + line.strip()
    return rows


def test_no_help_line_is_cut_short():
    ctx = click.Context(main, info_name="se-forwarder")
    commands = list(_commands(main, ctx, []))
    assert len(commands) >= 12
    groups = {(): main, **{tuple(p): c for p, c in commands if isinstance(c, click.Group)}}
    rows = {(*path, name): text for path in groups
            for name, text in _command_rows(cli(*path, "--help").stdout).items()}
    for path, command in commands:
        text = cli(*path, "--help").stdout
        assert not [line for line in text.splitlines()[1:] if line.rstrip().endswith("...")], path
        row = rows[tuple(path)]
        assert row.endswith((".", ")")), (path, row)
        parent = groups[tuple(path[:-1])]
        if path[-1] in getattr(parent, "lazy", {}):
            continue  # listed without importing its module; its text is the group's own
        first_sentence = " ".join((command.help or "").split("\n\n")[0].split(". ")[0].split())
        assert first_sentence.rstrip(".") in row, (path, row)


def test_every_exit_status_is_in_the_readme_table():
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("### Exit status"):]
    table = table[: table.index("\n\n", table.index("|"))]
    documented = {int(code) for code in re.findall(r"^\| `(\d+)` \|", table, re.M)}
    used = {0, 1, 2} | {cls.exit_code for cls in vars(errors).values()
                        if isinstance(cls, type) and issubclass(cls, errors.SeForwarderError)}
    assert used <= documented
    assert "Exit status: 0 success" in cli("--help").stdout


POLICY = """
[[approvals.rules]]
name = "hold-reboots"
when = { type = "Reboot" }
action = "wait"
[[approvals.rules]]
name = "skip-redeploys"
when = { type = "Redeploy" }
action = "ignore"
"""


def test_policy_log_lines_say_what_matched_and_what_happens_next(simulator, control, tmp_path):
    ids = {kind: control.add(EventType=kind)["EventId"] for kind in ("Freeze", "Reboot", "Redeploy")}
    config = tmp_path / "agent.toml"
    config.write_text(POLICY)
    result = cli("run", "--once", "--config", str(config), "--imds-url", simulator.url,
                 "--state-dir", str(tmp_path / "state"), "--sink", f"file:{tmp_path / 'e.jsonl'}",
                 env={"SE_FORWARDER_TELEMETRY_LOG_FORMAT": "text"})
    assert result.returncode == 0, result.stderr
    lines = {kind: next(line for line in result.stderr.splitlines()
                        if "policy:" in line and ids[kind] in line) for kind in ids}
    nb = r"it starts at its NotBefore \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"
    assert re.search(rf"policy: no rule matched; not approving; {nb}, unless approved remotely or "
                     "with se-forwarder approve", lines["Freeze"])
    assert re.search(rf"policy: rule hold-reboots matched \(wait\); not approving; {nb}, unless",
                     lines["Reboot"])
    assert re.search(rf"policy: rule skip-redeploys matched \(ignore\); no approval and no hooks; {nb}",
                     lines["Redeploy"])
