"""The Custom Script Extension settings and the cloud-init example that run the installers."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from se_forwarder import config

from .conftest import REPO, tool

MAKE_SETTINGS = REPO / "deploy/vm-extension/make-settings.sh"
LINUX_SCRIPT = REPO / "deploy/vm-extension/linux-extension.sh"
USER_DATA = REPO / "deploy/cloud-init/user-data.yaml"
INSTALL_PS1 = REPO / "deploy/windows/install.ps1"
BASE = "https://downloads.example.invalid/releases/se-forwarder-0.1.0"
WHEEL = "se_forwarder-0.1.0-py3-none-any.whl"
CONFIG = '[imds]\nurl = "http://169.254.169.254"\n\n[approvals]\ndry_run = true\n'
SECRETS = "APPROVALS_KEY=a2V5LWZvci10ZXN0cw==\n"


@pytest.fixture()
def release(tmp_path: Path) -> Path:
    """A release folder as scripts/release lays it out, with stand-in files: an install.sh that
    records its arguments, so that the extension's script can be run here for real."""
    folder = tmp_path / "release"
    (folder / "linux").mkdir(parents=True)
    (folder / "windows").mkdir()
    (folder / WHEEL).write_bytes(b"PK wheel")
    (folder / "linux/install.sh").write_text('printf "%s\\n" "$@" > "$ARGS_OUT"\n')
    (folder / "linux/se-forwarder.service").write_text("[Service]\n")
    (folder / "linux/10-restart-backoff.conf").write_text("[Service]\n")
    (folder / "windows/install.ps1").write_text("param()\n")
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    (folder / "SHA256SUMS").write_text("".join(
        f"{hashlib.sha256((folder / f).read_bytes()).hexdigest()}  {f}\n" for f in files))
    return folder


def downloaded(release: Path, into: Path) -> Path:
    """What the extension downloads (fileUris), by base name, into its folder."""
    into.mkdir()
    for name in (WHEEL, "linux/install.sh", "linux/se-forwarder.service", "linux/10-restart-backoff.conf"):
        (into / Path(name).name).write_bytes((release / name).read_bytes())
    return into


def make_settings(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(MAKE_SETTINGS), *args], capture_output=True, text=True, timeout=30, check=False
    )


def function_body(script: str, name: str) -> str:
    """A PowerShell function's text, up to the next top-level function."""
    start = script.index(f"\nfunction {name}")
    end = script.find("\nfunction ", start + 1)
    return script[start:end if end > 0 else len(script)]


def inputs(tmp_path: Path) -> tuple[Path, Path]:
    cfg, env = tmp_path / "config.toml", tmp_path / "se-forwarder.env"
    cfg.write_text(CONFIG)
    env.write_text(SECRETS)
    return cfg, env


def test_linux_settings_carry_config_and_secrets_inside_a_valid_script(tmp_path: Path, release: Path) -> None:
    cfg, env = inputs(tmp_path)
    proc = make_settings("--os", "linux", "--release", str(release), "--base-uri", BASE,
                         "--config", str(cfg), "--env", str(env))
    assert proc.returncode == 0, proc.stderr
    settings = json.loads(proc.stdout)
    assert settings["fileUris"] == [f"{BASE}/linux/install.sh", f"{BASE}/linux/se-forwarder.service",
                                    f"{BASE}/linux/10-restart-backoff.conf", f"{BASE}/{WHEEL}"]
    assert "commandToExecute" not in settings  # secrets stay off every command line
    script = base64.b64decode(settings["script"]).decode()
    assert not re.search(r"@@\w+@@", script)
    syntax = subprocess.run(["sh", "-n"], input=script, capture_output=True, text=True, timeout=10)
    assert syntax.returncode == 0, syntax.stderr
    blocks = re.findall(r"<<'SE_FORWARDER_B64'\n(.*?)\nSE_FORWARDER_B64\n", script, re.S)
    assert [base64.b64decode(b).decode() for b in blocks] == [
        CONFIG, SECRETS, (release / "SHA256SUMS").read_text()]
    assert f"wheel='{WHEEL}'" in script
    assert "APPROVALS_KEY" not in script


def run_extension(release: Path, folder: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The Linux extension's script, as make-settings.sh fills it in, run in its download folder."""
    cfg, env = inputs(tmp_path)
    settings = json.loads(make_settings("--os", "linux", "--release", str(release), "--base-uri", BASE,
                                        "--config", str(cfg), "--env", str(env)).stdout)
    script = base64.b64decode(settings["script"]).decode()
    return subprocess.run(["sh", "-c", script], cwd=folder, capture_output=True, text=True, timeout=30,
                          env={**os.environ, "ARGS_OUT": str(tmp_path / "args")})


def test_the_extension_runs_the_installer_only_when_every_download_matches_the_release(
        tmp_path: Path, release: Path) -> None:
    folder = downloaded(release, tmp_path / "download")
    proc = run_extension(release, folder, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "4 downloaded files match the release's SHA256SUMS" in proc.stdout
    args = (tmp_path / "args").read_text().splitlines()
    digest = hashlib.sha256((release / WHEEL).read_bytes()).hexdigest()
    assert args[args.index("--wheel") + 1:args.index("--wheel") + 6] == [
        f"./{WHEEL}", "--sha256", digest, "--extras", "eventhubs,queue"]
    assert "--config-file" in args and "--env-file" in args


@pytest.mark.parametrize("tampered", [WHEEL, "install.sh", "se-forwarder.service"])
def test_the_extension_refuses_a_download_that_is_not_the_releases(
        tmp_path: Path, release: Path, tampered: str) -> None:
    folder = downloaded(release, tmp_path / "download")
    with (folder / tampered).open("ab") as f:
        f.write(b"\n# injected\n")
    proc = run_extension(release, folder, tmp_path)
    assert proc.returncode != 0
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"se-forwarder: {tampered}: SHA-256 is ") and line.endswith("refusing to install")
    assert not (tmp_path / "args").exists()  # install.sh never ran


def test_windows_settings_keep_the_key_material_off_the_command_line(tmp_path: Path, release: Path) -> None:
    cfg, env = inputs(tmp_path)
    proc = make_settings("--os", "windows", "--release", str(release), "--base-uri", BASE,
                         "--config", str(cfg), "--env", str(env), "--sas", "sv=1&sig=x")
    assert proc.returncode == 0, proc.stderr
    settings = json.loads(proc.stdout)
    assert settings["fileUris"] == [f"{BASE}/windows/install.ps1?sv=1&sig=x", f"{BASE}/{WHEEL}?sv=1&sig=x"]
    command = settings["commandToExecute"]
    digest = hashlib.sha256((release / WHEEL).read_bytes()).hexdigest()
    assert f" -Wheel {WHEEL} -Sha256 {digest} -Extras eventhubs,queue " in command
    assert command.startswith("powershell.exe -NoProfile -NonInteractive -ExecutionPolicy Bypass ")
    args = dict(re.findall(r"-(ConfigBase64) (\S+)", command))
    assert base64.b64decode(args["ConfigBase64"]).decode() == CONFIG
    assert command.endswith(" -EnvFromExtension")
    # the environment (the key material) only as a protected setting of its own, in no form on the
    # command line
    assert base64.b64decode(settings["seForwarderEnv"]).decode() == SECRETS
    key = SECRETS.split("=", 1)[1].strip()
    for form in (SECRETS.strip(), key, settings["seForwarderEnv"], base64.b64decode(key).decode()):
        assert form not in command
    assert "EnvBase64" not in command


def test_windows_settings_without_an_environment_keep_the_installed_one(
        tmp_path: Path, release: Path) -> None:
    cfg, _ = inputs(tmp_path)
    proc = make_settings("--os", "windows", "--release", str(release), "--base-uri", BASE,
                         "--config", str(cfg))
    assert proc.returncode == 0, proc.stderr
    settings = json.loads(proc.stdout)
    assert "seForwarderEnv" not in settings and "-EnvFromExtension" not in settings["commandToExecute"]


def test_install_ps1_takes_secrets_only_from_a_file_or_the_protected_settings() -> None:
    script = INSTALL_PS1.read_text()
    params = script[script.index("param("):script.index("Set-StrictMode")]
    assert "[switch] $EnvFromExtension" in params and "[string] $EnvFile" in params
    assert "Base64" not in params.replace("$ConfigBase64", "")  # no secret as an argument value
    reader = function_body(script, "Get-ExtensionEnvironment")
    # the extension's own settings for this run, decrypted with the machine's certificate
    assert 'Join-Path $handler "RuntimeSettings\\$sequence.settings"' in reader
    assert "protectedSettingsCertThumbprint" in reader
    assert "New-Object Security.Cryptography.Pkcs.EnvelopedCms" in reader and "$cms.Decrypt(" in reader
    assert "$protected.seForwarderEnv" in reader
    assert not re.search(r"Write-Host|Say |Out-File|Set-Content", reader)  # never printed nor saved


def test_install_ps1_writes_the_environment_readable_only_by_the_service_account() -> None:
    script = INSTALL_PS1.read_text()
    install = function_body(script, "Install-Config")
    assert "Set-FileContent $EnvPath (Get-ExtensionEnvironment)" in install
    written = install.index("Set-FileContent $EnvPath (Get-ExtensionEnvironment)")
    assert "Set-PrivateAcl $EnvPath 'Read'" in install[written:]
    # its folder is private before the file is written, so it is never readable by others
    assert install.index("Set-PrivateAcl $DataDir") < written
    acl = function_body(script, "Set-PrivateAcl")
    assert "$acl.SetAccessRuleProtection($true, $false)" in acl  # no inherited access
    rules = re.search(r"\$rights = \[ordered\] @\{(.*?)\}", acl).group(1)
    assert re.findall(r"\$(\w+Sid) =", rules) == ["SystemSid", "AdministratorsSid", "LocalServiceSid"]
    sids = dict(re.findall(r"^\$(\w+Sid) = '([^']+)'", script, re.M))
    assert sids == {"SystemSid": "S-1-5-18", "AdministratorsSid": "S-1-5-32-544",
                    "LocalServiceSid": "S-1-5-19"}


def test_make_settings_rejects_bad_input_with_one_line(tmp_path: Path, release: Path) -> None:
    cfg, _ = inputs(tmp_path)
    cases = {
        ("--os", "bsd", "--base-uri", BASE, "--config", str(cfg)): "--os must be linux or windows",
        ("--os", "linux", "--base-uri", "http://insecure", "--config", str(cfg)):
            "--base-uri must be an https:// URL",
        ("--os", "linux", "--base-uri", BASE, "--config", str(tmp_path / "none")):
            f"--config: cannot read '{tmp_path / 'none'}'",
        ("--os", "linux", "--base-uri", BASE, "--config", str(cfg)):
            "--release is required (the folder scripts/release made: its SHA256SUMS and wheel)",
        ("--os", "linux", "--base-uri", BASE, "--config", str(cfg), "--release", str(release),
         "--package", "se-forwarder==0.1.0"): "--package needs --index-url (your private index)",
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
    assert script_fields == {"CONFIG_B64", "ENV_B64", "SUMS_B64", "WHEEL", "INDEX_URL", "EXTRAS",
                             "PACKAGE_SPEC", "BASE_URI"}
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
    assert "bash linux/install.sh --wheel" in command[2] and "--sha256" in command[2]
    assert "sha256sum --check" in command[2]  # each download against the sums carried in user data
    assert "se-approvals-{vm_id}" in files["/etc/se-forwarder/config.toml"]["content"]


def references(node: object, doc: dict) -> set[str]:
    """Every parameter and variable an expression uses, through the variables it uses."""
    names = set(doc.get("parameters") or {}) | set(doc.get("variables") or {})
    found: set[str] = set()

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(key)
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str):
            used = {value} if value in names else set()
            for inner in re.findall(r"\$\{([^}]*)\}", value):
                used |= set(re.findall(r"[A-Za-z_]\w*", inner)) & names
            for name in used - found:
                found.add(name)
                if name in (doc.get("variables") or {}):
                    walk(doc["variables"][name]["value"])

    walk(node)
    return found


def test_bicep_passes_the_agent_environment_only_through_protected_settings(bicep_docs) -> None:
    # The environment file carries the verify keys today and any secret a user adds tomorrow.
    doc = bicep_docs["modules/vm-agent.bicep"]
    secret = "approvalVerifyKeys"
    windows = doc["resources"]["windowsInstaller"]["config"]["config"]["properties"]
    linux = doc["resources"]["linuxInstaller"]["config"]["config"]["properties"]
    for installer in (windows, linux):
        assert installer["settings"] == {}  # public settings are returned by the API: nothing there
        # union(the settings, the download identity): the settings are the first argument
        union = installer["protectedSettings"]["function"]
        assert union["type"] == "union" and union["parameters"]["arg_2"] == "downloadIdentity"
        installer["protectedSettings"] = union["parameters"]["arg_1"]
    assert secret not in references(windows["protectedSettings"]["commandToExecute"], doc)
    assert secret in references(windows["protectedSettings"]["seForwarderEnv"], doc)
    assert windows["protectedSettings"]["commandToExecute"] == "windowsCommand"
    assert doc["variables"]["windowsCommand"]["value"].endswith(" -EnvFromExtension")
    assert "commandToExecute" not in linux["protectedSettings"]  # Linux: inside the script
    assert secret in references(linux["protectedSettings"]["script"], doc)


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, standing in for the storage account's TLS."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_a_run_command_downloads_the_release_with_its_sas_checks_it_and_installs(
        tmp_path: Path, release: Path) -> None:
    import ssl
    import threading
    from functools import partial
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    requests: list[str] = []

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            requests.append(self.path)

    cert, key = _self_signed(tmp_path)
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(release)))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"https://127.0.0.1:{server.server_address[1]}"
        cfg, _ = inputs(tmp_path)
        env = tmp_path / "public.env"
        env.write_text("APPROVALS_PUBLIC_KEYS=a2V5LWZvci10ZXN0cy1vbmx5LXB1YmxpYy0wMDAwMDAwMDA=\n")
        made = make_settings("--os", "linux", "--run-command", "--release", str(release), "--base-uri", base,
                             "--config", str(cfg), "--env", str(env))
        assert made.returncode == 0, made.stderr
        run = tmp_path / "run"
        run.mkdir()
        proc = subprocess.run(["sh", "-c", made.stdout], cwd=run, capture_output=True, text=True, timeout=60,
                              env={**os.environ, "ARGS_OUT": str(tmp_path / "args"),
                                   "SE_RELEASE_SAS": "sv=2024&sig=s3cret", "CURL_CA_BUNDLE": str(cert)})
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    assert proc.returncode == 0, proc.stderr
    assert "4 downloaded files match the release's SHA256SUMS" in proc.stdout
    assert sorted(requests) == sorted(f"/{p}?sv=2024&sig=s3cret" for p in (
        "linux/install.sh", "linux/se-forwarder.service", "linux/10-restart-backoff.conf", WHEEL))
    args = (tmp_path / "args").read_text().splitlines()
    assert args[args.index("--wheel") + 1] == f"./{WHEEL}"


def test_a_run_command_carries_no_secret_in_its_readable_script(tmp_path: Path, release: Path) -> None:
    cfg, env = inputs(tmp_path)  # env holds APPROVALS_KEY: a secret
    proc = make_settings("--os", "linux", "--run-command", "--release", str(release), "--base-uri", BASE,
                         "--config", str(cfg), "--env", str(env))
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [
        "make-settings.sh: error: --run-command: a Run Command's script is readable with the VM: --env may "
        "hold only APPROVALS_PUBLIC_KEYS"]
