"""Configuration: file < environment < flags; every bad key or value named in one line."""

import pytest

from se_forwarder import config
from se_forwarder.errors import ConfigError


def write(tmp_path, text):
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_defaults_poll_the_real_imds_every_second_into_stdout():
    s = config.load(None, env={})
    assert s.imds.url == "http://169.254.169.254"
    assert s.imds.api_version == "2020-07-01"
    assert s.imds.poll_interval == 1.0
    assert [k.type for k in s.sinks] == ["stdout"]


def test_file_values_are_read(tmp_path):
    s = config.load(write(tmp_path, '[imds]\nurl = "http://127.0.0.1:9"\npoll_interval = 0.5\n'
                                    '[[sinks]]\ntype = "file"\npath = "/tmp/x.jsonl"\n'), env={})
    assert (s.imds.url, s.imds.poll_interval) == ("http://127.0.0.1:9", 0.5)
    assert s.sinks[0].name == "file:/tmp/x.jsonl"


def test_environment_overrides_file_and_flags_override_environment(tmp_path):
    path = write(tmp_path, '[imds]\npoll_interval = 0.5\nurl = "http://127.0.0.1:1"\n')
    env = {"SE_FORWARDER_IMDS_POLL_INTERVAL": "2", "SE_FORWARDER_IMDS_URL": "http://127.0.0.1:2"}
    s = config.load(path, env=env, overrides={"imds": {"url": "http://127.0.0.1:3"}})
    assert s.imds.poll_interval == 2.0
    assert s.imds.url == "http://127.0.0.1:3"


def test_sinks_from_environment_and_flags():
    s = config.load(None, env={"SE_FORWARDER_SINKS": "stdout,file:/tmp/a.jsonl"})
    assert [k.type for k in s.sinks] == ["stdout", "file"]
    s = config.load(None, env={}, sink_specs=["file:/tmp/b.jsonl"])
    assert [k.name for k in s.sinks] == ["file:/tmp/b.jsonl"]


@pytest.mark.parametrize(
    "text, key",
    [
        ('[imds]\nurl = "ftp://x"\n', "imds.url"),
        ('[imds]\npoll_interval = "fast"\n', "imds.poll_interval"),
        ("[imds]\npoll_interval = 0\n", "imds.poll_interval"),
        ('[imds]\napi_version = "{latest}"\n', "imds.api_version"),
        ("[imds]\nbogus = 1\n", "imds.bogus"),
        ("[nope]\n", "nope"),
        ('[[sinks]]\ntype = "kafka"\n', "sinks[0].type"),
        ('[[sinks]]\ntype = "file"\n', "sinks[0].path"),
        ('[[sinks]]\ntype = "stdout"\ncolour = 1\n', "sinks[0].colour"),
        ('[telemetry]\nlog_format = "xml"\n', "telemetry.log_format"),
        ("[approvals]\ndry_run = 1\n", "approvals.dry_run"),
        ('[[approvals.rules]]\naction = "yolo"\n', "approvals.rules[0].action"),
        ('[[approvals.rules]]\naction = "approve"\nwhen = { type = "Nap" }\n',
         "approvals.rules[0].when.type"),
        ('[state]\ndir = 3\n', "state.dir"),
    ],
)
def test_bad_key_or_value_is_named(tmp_path, text, key):
    with pytest.raises(ConfigError) as info:
        config.load(write(tmp_path, text), env={})
    assert key in str(info.value)
    assert "\n" not in str(info.value)


def test_unknown_environment_setting_is_named():
    with pytest.raises(ConfigError, match="SE_FORWARDER_IMDS"):
        config.load(None, env={"SE_FORWARDER_IMDSURL": "x"})


def test_invalid_toml_is_one_line_naming_the_file(tmp_path):
    with pytest.raises(ConfigError, match="not valid TOML"):
        config.load(write(tmp_path, "[imds\n"), env={})


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        config.load(tmp_path / "nope.toml", env={})


def test_webhook_sink_name_never_contains_the_query_string():
    from se_forwarder.sinks import default_name

    assert default_name("webhook", {"url": "https://h.example/api/x?code=SECRET"}) == (
        "webhook:https://h.example/api/x")


def test_api_version_from_environment_is_a_string_not_a_toml_date():
    s = config.load(None, env={"SE_FORWARDER_IMDS_API_VERSION": "2019-08-01"})
    assert s.imds.api_version == "2019-08-01"


def test_config_file_environment_variable_is_not_taken_for_a_setting():
    s = config.load(None, env={"SE_FORWARDER_CONFIG": "/etc/se-forwarder/config.toml"})
    assert s.imds.url == "http://169.254.169.254"


@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1:99999", "http://h:port/"])
def test_malformed_imds_url_is_one_line_naming_the_key(url):
    with pytest.raises(ConfigError, match="imds.url") as info:
        config.load(None, env={}, overrides={"imds": {"url": url}})
    assert "\n" not in str(info.value)


def test_malformed_webhook_url_is_a_config_error_naming_the_sink():
    with pytest.raises(ConfigError, match=r"sinks\[0\]"):
        config.load(None, env={}, sink_specs=["webhook:http://[::1"])


@pytest.mark.parametrize(
    "text, key",
    [
        ("[telemetry]\nprometheus_port = 9090.5\n", "telemetry.prometheus_port"),
        ('[[sinks]]\ntype = "file"\npath = "/tmp/x"\nkeep = 2.5\n', "sinks[0].keep"),
    ],
)
def test_whole_number_settings_refuse_a_fraction(tmp_path, text, key):
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        config.load(write(tmp_path, text), env={})


def test_webhook_sink_name_hides_tokens_carried_in_the_path():
    from se_forwarder.sinks import default_name

    slack = default_name("webhook", {"url": "https://hooks.slack.com/services/T0A1B2C3D/B0A1B2C3D/"
                                            "abcdefghijklmnopqrstuvwx"})
    assert slack == "webhook:https://hooks.slack.com/services/T0A1B2C3D/B0A1B2C3D/***"
    discord = default_name("webhook", {"url": "https://discord.com/api/webhooks/123456789012345678/"
                                              "tok-en_0123456789abcdefghij"})
    assert discord == "webhook:https://discord.com/api/webhooks/***/***"
    assert default_name("webhook", {"url": "https://x.example:8443/api/Trigger1"}) == (
        "webhook:https://x.example:8443/api/Trigger1")


def test_vm_tags_name_the_tags_copied_into_the_events(tmp_path):
    s = config.load(write(tmp_path, '[vm]\ntags = ["tier", "app"]\n'), env={})
    assert s.vm.tags == ["tier", "app"]
    assert config.load(None, env={}).vm.tags == []  # none by default: tags may hold secrets
    s = config.load(None, env={"SE_FORWARDER_VM_TAGS": '["tier"]'})
    assert s.vm.tags == ["tier"]


@pytest.mark.parametrize("text, key", [
    ('[vm]\ntags = "tier"\n', "vm.tags"),
    ('[vm]\ntags = ["tier", ""]\n', "vm.tags"),
    ('[vm]\ntags = ["Tier", "tier"]\n', "vm.tags"),
    ("[vm]\ncolour = 1\n", "vm.colour"),
    ('[[sinks]]\ntype = "stdout"\nheartbeat_interval = "often"\n', "sinks[0].heartbeat_interval"),
    ('[[sinks]]\ntype = "stdout"\nheartbeat_interval = 0.5\n', "sinks[0].heartbeat_interval"),
    ('[imds]\nlease_files = "/var/lib/dhcp/*"\n', "imds.lease_files"),
    ('[approvals.hooks]\nprepare = ["true"]\nprepare_lead = -1\n', "approvals.hooks.prepare_lead"),
    ('[[approvals.rules]]\naction = "approve"\nwhen = { description = 3 }\n',
     "approvals.rules[0].when.description"),
])
def test_new_keys_are_validated_by_name(tmp_path, text, key):
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        config.load(write(tmp_path, text), env={})


def test_heartbeat_interval_belongs_to_any_sink_and_is_off_by_default(tmp_path):
    s = config.load(write(tmp_path, '[[sinks]]\ntype = "file"\npath = "/tmp/h.jsonl"\n'
                                    'heartbeat_interval = 60\n[[sinks]]\ntype = "stdout"\n'), env={})
    assert [(k.name, k.heartbeat_interval) for k in s.sinks] == [("file:/tmp/h.jsonl", 60.0),
                                                                  ("stdout", 0.0)]
    assert "heartbeat_interval" not in s.sinks[0].options


def test_old_max_backoff_is_still_accepted(tmp_path):
    s = config.load(write(tmp_path, "[imds]\nmax_backoff = 30.0\n"), env={})
    assert s.imds.max_backoff == 30.0
    assert config.load(None, env={}).imds.max_backoff is None


def test_discover_is_an_imds_url(tmp_path):
    s = config.load(None, env={"SE_FORWARDER_IMDS_URL": "discover",
                               "SE_FORWARDER_IMDS_LEASE_FILES": '["/tmp/x/*.leases"]'})
    assert (s.imds.url, s.imds.lease_files) == ("discover", ["/tmp/x/*.leases"])
