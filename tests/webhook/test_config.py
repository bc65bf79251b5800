"""Configuration of webhook sinks: every key checked, every mistake named in one line."""

from __future__ import annotations

import pytest

from se_forwarder import config
from se_forwarder.errors import ConfigError
from se_forwarder.sinks import webhook
from tests.support.sinks import make_sink


def check(**options):
    return webhook.validate(options, "sinks[0]")


def refused(**options) -> str:
    with pytest.raises(ConfigError) as info:
        check(**options)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_defaults_are_structured_mode_and_5_s_connect_15_s_read():
    options = check(url="https://hooks.example.com/se")

    assert options["mode"] == "structured"
    assert (options["connect_timeout"], options["read_timeout"]) == (5.0, 15.0)
    assert options["handshake"] is False and options["auth"] == "none"


def test_the_webhook_sink_spec_of_the_command_line_makes_a_webhook_sink():
    settings = config.load(None, env={}, sink_specs=["webhook:https://hooks.example.com/se?code=k"])

    [sink] = settings.sinks
    assert sink.type == "webhook"
    assert sink.options["url"] == "https://hooks.example.com/se?code=k"
    assert sink.name == "webhook:https://hooks.example.com/se"  # no query string in the name


def test_an_unknown_key_is_named():
    assert refused(url="https://h.example/x", retries=3).startswith("sinks[0].retries: unknown key")


def test_tls_verification_cannot_be_turned_off():
    assert refused(url="https://h.example/x", verify=False).startswith("sinks[0].verify: unknown key")


def test_the_url_is_required():
    assert refused().startswith("sinks[0].url: missing")


def test_plain_http_is_refused_for_a_remote_host():
    message = refused(url="http://hooks.example.com/se")

    assert message.startswith("sinks[0].url: plain http is allowed only to a loopback address")


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080/x", "http://localhost/x", "http://[::1]:9/x"])
def test_plain_http_is_allowed_to_loopback(url):
    assert check(url=url)["url"] == url


def test_credentials_in_the_url_are_refused_without_echoing_them():
    message = refused(url="https://user:hunter2@h.example/x")

    assert message.startswith("sinks[0].url: credentials in the URL are not allowed")
    assert "hunter2" not in message


def test_an_unknown_mode_is_named():
    assert refused(url="https://h.example/x", mode="json").startswith("sinks[0].mode: 'json' is not one")


@pytest.mark.parametrize("key", ["batch_max_events", "batch_max_bytes"])
def test_batch_limits_only_apply_to_batch_mode(key):
    assert refused(url="https://h.example/x", **{key: 10}).startswith(f"sinks[0].{key}: only applies")


def test_batch_limits_are_range_checked():
    message = refused(url="https://h.example/x", mode="batch", batch_max_events=0)

    assert message.startswith("sinks[0].batch_max_events: 0 is out of range")


def test_a_timeout_must_be_a_positive_number():
    assert refused(url="https://h.example/x", read_timeout="15").startswith(
        "sinks[0].read_timeout: must be a number"
    )


def test_secret_env_takes_a_string_or_a_list():
    assert check(url="https://h.example/x", secret_env="A")["secret_env"] == ("A",)
    assert check(url="https://h.example/x", secret_env=["A", "B"])["secret_env"] == ("A", "B")
    assert refused(url="https://h.example/x", secret_env=[]).startswith("sinks[0].secret_env: must be")


def test_a_missing_secret_variable_stops_the_start_naming_it(monkeypatch):
    monkeypatch.delenv("NO_SUCH_HOOK_SECRET", raising=False)

    with pytest.raises(ConfigError, match="secret_env: environment variable NO_SUCH_HOOK_SECRET is not"):
        make_sink(url="https://h.example/x", secret_env="NO_SUCH_HOOK_SECRET")


def test_a_secret_that_is_not_whsec_is_refused_without_echoing_it(monkeypatch):
    monkeypatch.setenv("HOOK_SECRET", "plain-password-123")

    with pytest.raises(ConfigError) as info:
        make_sink(url="https://h.example/x", secret_env="HOOK_SECRET")

    assert "$HOOK_SECRET does not start with whsec_" in str(info.value)
    assert "plain-password-123" not in str(info.value)


def test_an_unreadable_secret_file_is_named(tmp_path):
    missing = tmp_path / "nope"

    with pytest.raises(ConfigError, match=f"secret_file: cannot read {missing}"):
        make_sink(url="https://h.example/x", secret_file=str(missing))


@pytest.mark.parametrize("name", ["Content-Type", "webhook-signature", "ce-id", "Host"])
def test_headers_the_sink_owns_cannot_be_overridden(name):
    message = refused(url="https://h.example/x", headers={name: "x"})

    assert message == f"sinks[0].headers.{name}: this header is set by the sink and cannot be overridden"


def test_a_header_value_with_a_line_break_is_refused():
    assert "line breaks" in refused(url="https://h.example/x", headers={"X-A": "a\r\nX-B: b"})


def test_a_header_value_http_cannot_carry_is_refused_without_echoing_it():
    message = refused(url="https://h.example/x", headers={"X-Team": "sre \u201cblue\u201d"})

    assert message.startswith("sinks[0].headers.X-Team: the value has a character an HTTP header cannot")
    assert "blue" not in message


def test_a_header_value_from_the_environment_http_cannot_carry_stops_the_start(monkeypatch):
    monkeypatch.setenv("TEST_HOOK_API_KEY", "key\u2019s-value")

    with pytest.raises(ConfigError, match="headers.X-Api-Key: the value has a character") as info:
        make_sink(url="https://h.example/x", headers={"X-Api-Key": {"env": "TEST_HOOK_API_KEY"}})
    assert "s-value" not in str(info.value)


def test_authorization_is_owned_by_the_sink_with_entra_auth():
    message = refused(url="https://h.example/x", auth="entra", scope="api://x/.default",
                      headers={"Authorization": "Basic abc"})

    assert message.startswith("sinks[0].headers.Authorization: this header is set by the sink")


def test_entra_auth_needs_a_scope():
    assert refused(url="https://h.example/x", auth="entra").startswith("sinks[0].scope: missing")


def test_scope_and_client_id_only_apply_to_entra_auth():
    assert refused(url="https://h.example/x", scope="api://x/.default").startswith(
        "sinks[0].scope: only applies"
    )


def test_a_ca_file_without_a_certificate_is_refused_at_start(tmp_path):
    not_pem = tmp_path / "ca.txt"
    not_pem.write_text("hello")

    with pytest.raises(ConfigError, match="holds no PEM certificate"):
        make_sink(url="https://h.example/x", ca_file=str(not_pem))


def test_a_config_file_with_a_bad_webhook_key_fails_with_one_line_naming_it(tmp_path):
    path = tmp_path / "agent.toml"
    path.write_text('[[sinks]]\ntype = "webhook"\nurl = "https://h.example/x"\nmode = "batch"\n'
                    'batch_max_bytes = "1MB"\n')

    with pytest.raises(ConfigError, match=r"^sinks\[0\]\.batch_max_bytes: must be a number"):
        config.load(path, env={})
