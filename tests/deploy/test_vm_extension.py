"""The Custom Script Extension settings and the cloud-init example that run the installers."""

from __future__ import annotations

import base64
import json
import re
import subprocess
from pathlib import Path

from se_forwarder import config

from .conftest import REPO, tool

MAKE_SETTINGS = REPO / "deploy/vm-extension/make-settings.sh"
LINUX_SCRIPT = REPO / "deploy/vm-extension/linux-extension.sh"
USER_DATA = REPO / "deploy/cloud-init/user-data.yaml"
BASE = "https://downloads.example.invalid/se-forwarder/v0.1.0/deploy"
CONFIG = '[imds]\nurl = "http://169.254.169.254"\n\n[approvals]\ndry_run = true\n'
SECRETS = "APPROVALS_KEY=a2V5LWZvci10ZXN0cw==\n"


def make_settings(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(MAKE_SETTINGS), *args], capture_output=True, text=True, timeout=30, check=False
    )


def inputs(tmp_path: Path) -> tuple[Path, Path]:
    cfg, env = tmp_path / "config.toml", tmp_path / "se-forwarder.env"
    cfg.write_text(CONFIG)
    env.write_text(SECRETS)
    return cfg, env


def test_linux_settings_carry_config_and_secrets_inside_a_valid_script(tmp_path: Path) -> None:
    cfg, env = inputs(tmp_path)
    proc = make_settings("--os", "linux", "--base-uri", BASE, "--config", str(cfg), "--env", str(env))
    assert proc.returncode == 0, proc.stderr
    settings = json.loads(proc.stdout)
    assert settings["fileUris"] == [f"{BASE}/linux/install.sh", f"{BASE}/linux/se-forwarder.service",
                                    f"{BASE}/linux/10-restart-backoff.conf"]
    assert "commandToExecute" not in settings  # secrets stay off every command line
    script = base64.b64decode(settings["script"]).decode()
    assert not re.search(r"@@\w+@@", script)
    syntax = subprocess.run(["sh", "-n"], input=script, capture_output=True, text=True, timeout=10)
    assert syntax.returncode == 0, syntax.stderr
    blocks = re.findall(r"<<'SE_FORWARDER_B64'\n(.*?)\nSE_FORWARDER_B64\n", script, re.S)
    assert [base64.b64decode(b).decode() for b in blocks] == [CONFIG, SECRETS]
    assert "bash ./install.sh --package 'se-forwarder[eventhubs,queue]'" in script
    assert "APPROVALS_KEY" not in script


def test_windows_settings_run_install_ps1_with_config_and_environment(tmp_path: Path) -> None:
    cfg, env = inputs(tmp_path)
    proc = make_settings("--os", "windows", "--base-uri", BASE, "--config", str(cfg), "--env", str(env))
    assert proc.returncode == 0, proc.stderr
    settings = json.loads(proc.stdout)
    assert settings["fileUris"] == [f"{BASE}/windows/install.ps1"]
    command = settings["commandToExecute"]
    assert command.startswith("powershell.exe -NoProfile -NonInteractive -ExecutionPolicy Bypass ")
    args = dict(re.findall(r"-(ConfigBase64|EnvBase64) (\S+)", command))
    assert base64.b64decode(args["ConfigBase64"]).decode() == CONFIG
    assert base64.b64decode(args["EnvBase64"]).decode() == SECRETS


def test_make_settings_rejects_bad_input_with_one_line(tmp_path: Path) -> None:
    cfg, _ = inputs(tmp_path)
    cases = {
        ("--os", "bsd", "--base-uri", BASE, "--config", str(cfg)): "--os must be linux or windows",
        ("--os", "linux", "--base-uri", "http://insecure", "--config", str(cfg)):
            "--base-uri must be an https:// URL",
        ("--os", "linux", "--base-uri", BASE, "--config", str(tmp_path / "none")):
            f"--config: cannot read '{tmp_path / 'none'}'",
    }
    for args, message in cases.items():
        proc = make_settings(*args)
        assert proc.returncode != 0
        assert proc.stderr.strip().splitlines() == [f"make-settings.sh: error: {message}"]


def test_every_placeholder_is_filled_in_by_the_bicep_module() -> None:
    module = (REPO / "bicep/modules/vm-agent.bicep").read_text()
    filled = set(re.findall(r"'@@(\w+)@@'", module))
    script_fields = set(re.findall(r"@@(\w+)@@", LINUX_SCRIPT.read_text().split("set -eu", 1)[1]))
    config_fields = set()
    for template in ("bicep/agent-config.toml", "bicep/agent-config-logs.toml"):
        config_fields |= set(re.findall(r"@@(\w+)@@", (REPO / template).read_text()))
    assert script_fields == {"CONFIG_B64", "ENV_B64", "PACKAGE_SPEC"}
    assert script_fields | config_fields == filled


def test_cloud_init_user_data_is_valid_and_its_files_are_a_valid_config(tmp_path: Path) -> None:
    assert USER_DATA.read_text().startswith("#cloud-config\n")
    proc = subprocess.run(
        [str(tool("python")), "-c",
         "import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)",
         str(USER_DATA)],
        capture_output=True, text=True, timeout=30, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    files = {f["path"]: f for f in data["write_files"]}
    cfg = tmp_path / "config.toml"
    cfg.write_text(files["/etc/se-forwarder/config.toml"]["content"])
    settings = config.load(cfg, env={})
    assert [s.type for s in settings.sinks] == ["eventhubs"]
    assert files["/etc/se-forwarder/se-forwarder.env"]["permissions"] == "0600"
    (command,) = data["runcmd"]
    assert command[:2] == ["bash", "-c"]
    syntax = subprocess.run(["bash", "-n"], input=command[2], capture_output=True, text=True,
                            timeout=10)
    assert syntax.returncode == 0, syntax.stderr
    assert 'install.sh" --package' in command[2]
