"""``[health]``: sane defaults, and one clear line naming the key for every bad value."""

from __future__ import annotations

import pytest

from se_forwarder import config
from se_forwarder.errors import ConfigError
from tests.support.cli import cli


def load(tmp_path, text: str, env: dict[str, str] | None = None):
    path = tmp_path / "agent.toml"
    path.write_text(text)
    return config.load(path, env=env or {})


HTTP = '[health]\n[[health.probes]]\ntype = "http"\nurl = "http://127.0.0.1:8080/healthz"\n'


def test_without_a_health_section_the_agent_runs_no_probes(tmp_path):
    assert load(tmp_path, "").health is None


def test_one_http_probe_gets_the_documented_defaults(tmp_path):
    health = load(tmp_path, HTTP).health
    assert (health.interval, health.timeout) == (10.0, 5.0)
    assert (health.healthy_threshold, health.unhealthy_threshold) == (1, 3)
    (probe,) = health.probes
    assert probe.type == "http" and probe.url == "http://127.0.0.1:8080/healthz"
    assert probe.name == "http http://127.0.0.1:8080/healthz"
    assert probe.timeout == 5.0
    assert probe.expect_status == tuple(range(200, 400))


def test_every_probe_type_reads_its_keys(tmp_path):
    health = load(tmp_path, """
[health]
interval = 2
timeout = 1.5
healthy_threshold = 2
unhealthy_threshold = 4
env = ["HOME"]
[[health.probes]]
type = "http"
name = "web"
url = "https://app.internal:8443/ready?deep=1"
expect_status = [200, 204]
timeout = 1
[[health.probes]]
type = "tcp"
address = "[::1]:5432"
[[health.probes]]
type = "command"
command = ["/usr/local/bin/check-app", "--quick"]
""").health
    web, db, check = health.probes
    assert (web.name, web.expect_status, web.timeout) == ("web", (200, 204), 1.0)
    assert (db.name, db.host, db.port, db.timeout) == ("tcp [::1]:5432", "::1", 5432, 1.5)
    assert (check.name, check.command) == ("command check-app", ("/usr/local/bin/check-app", "--quick"))
    assert (health.interval, health.healthy_threshold, health.unhealthy_threshold) == (2.0, 2, 4)
    assert health.env == ("HOME",)


def test_a_short_interval_gets_a_timeout_that_ends_before_the_next_round(tmp_path):
    health = load(tmp_path, HTTP.replace("[health]\n", "[health]\ninterval = 2\n")).health
    assert health.timeout == 1.0


def test_the_interval_may_come_from_the_environment(tmp_path):
    health = load(tmp_path, HTTP, env={"SE_FORWARDER_HEALTH_INTERVAL": "30"}).health
    assert health.interval == 30.0


@pytest.mark.parametrize("text, line", [
    ('[health]\n[[health.probes]]\ntype = "grpc"\n',
     "health.probes[0].type: 'grpc' is not a probe type (http, tcp, command)"),
    ('[health]\n[[health.probes]]\nurl = "http://x"\n',
     "health.probes[0].type: None is not a probe type (http, tcp, command)"),
    ('[health]\n[[health.probes]]\ntype = "http"\nurl = "ftp://127.0.0.1/x"\n',
     "health.probes[0].url: must be an http:// or https:// URL, not ftp://"),
    ('[health]\n[[health.probes]]\ntype = "http"\nurl = "not a url"\n',
     "health.probes[0].url: must be an http:// or https:// URL"),
    ('[health]\n[[health.probes]]\ntype = "http"\nurl = "http:///healthz"\n',
     "health.probes[0].url: the URL names no host, e.g. http://127.0.0.1:8080/healthz"),
    ('[health]\n[[health.probes]]\ntype = "http"\nurl = "http://127.0.0.1:99999/x"\n',
     "health.probes[0].url: bad port in 'http://127.0.0.1/x'"),
    ('[health]\n[[health.probes]]\ntype = "http"\n',
     'health.probes[0].url: an http probe needs a url, e.g. "http://127.0.0.1:8080/healthz"'),
    ('[health]\n[[health.probes]]\ntype = "http"\nurl = "http://h/x"\nexpect_status = 99\n',
     "health.probes[0].expect_status: 99 is out of range (100..599)"),
    ('[health]\n[[health.probes]]\ntype = "http"\nurl = "http://h/x"\nca_file = "/x.pem"\n',
     "health.probes[0].ca_file: only applies to an https url"),
    ('[health]\n[[health.probes]]\ntype = "tcp"\naddress = "db.internal"\n',
     "health.probes[0].address: 'db.internal' is not host:port "
     '(e.g. "127.0.0.1:5432" or "[::1]:5432")'),
    ('[health]\n[[health.probes]]\ntype = "tcp"\naddress = "::1:5432"\n',
     "health.probes[0].address: '::1:5432' is not host:port "
     '(e.g. "127.0.0.1:5432" or "[::1]:5432")'),
    ('[health]\n[[health.probes]]\ntype = "tcp"\naddress = "127.0.0.1:0"\n',
     "health.probes[0].address: port 0 is out of range (1..65535)"),
    ('[health]\n[[health.probes]]\ntype = "tcp"\n',
     "health.probes[0].address: '' is not host:port (e.g. \"127.0.0.1:5432\" or \"[::1]:5432\")"),
    ('[health]\n[[health.probes]]\ntype = "command"\n',
     'health.probes[0].command: a command probe needs a command as a list of strings, '
     'e.g. ["/usr/local/bin/check-app", "--quick"]'),
    ('[health]\n[[health.probes]]\ntype = "command"\ncommand = "check-app"\n',
     'health.probes[0].command: a command probe needs a command as a list of strings, '
     'e.g. ["/usr/local/bin/check-app", "--quick"]'),
    ('[health]\n[[health.probes]]\ntype = "tcp"\naddress = "h:1"\nurl = "http://h"\n',
     "health.probes[0].url: unknown key (known: type, name, timeout, address)"),
    ('[health]\ninterval = 10\n',
     'health.probes: give at least one probe, e.g. [[health.probes]] type = "http" '
     'url = "http://127.0.0.1:8080/healthz"'),
    (HTTP.replace("[health]\n", "[health]\ninterval = 5\ntimeout = 5\n"),
     "health.timeout: 5 s is not shorter than the interval (5 s); a probe must end before the next "
     "round starts"),
    (HTTP.replace("[health]\n", "[health]\ninterval = 0.5\n"),
     "health.interval: 0.5 is out of range (1..3600)"),
    (HTTP.replace("[health]\n", "[health]\nunhealthy_threshold = 0\n"),
     "health.unhealthy_threshold: 0 is out of range (1..100)"),
    (HTTP.replace("[health]\n", "[health]\nhealthy_threshold = 1.5\n"),
     "health.healthy_threshold: must be a whole number, not 1.5"),
    (HTTP.replace("[health]\n", "[health]\nenv = [\"A=B\"]\n"),
     "health.env: 'A=B' is not an environment variable name (letters, digits and _, not starting "
     "with a digit; no =VALUE)"),
    (HTTP.replace("[health]\n", "[health]\nretries = 3\n"),
     "health.retries: unknown key (known: interval, timeout, healthy_threshold, unhealthy_threshold, "
     "env, probes)"),
    (HTTP + HTTP.replace("[health]\n", ""),
     "health.probes[1].name: 'http http://127.0.0.1:8080/healthz' names another probe too; give each "
     "probe its own name"),
])
def test_bad_health_settings_are_one_line_naming_the_key(tmp_path, text, line):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    assert str(info.value) == line


def test_a_bad_probe_stops_the_agent_with_one_line_and_exit_2(tmp_path):
    path = tmp_path / "agent.toml"
    path.write_text('[health]\n[[health.probes]]\ntype = "icmp"\n')
    result = cli("run", "--config", str(path), "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "se-forwarder: error: health.probes[0].type: 'icmp' is not a probe type (http, tcp, command)"]
