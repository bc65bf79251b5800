"""Log redaction: NAME=value is scrubbed whenever NAME looks like it holds a secret."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from se_forwarder.telemetry import redact

SECRET_WORDS = ("SECRET", "CLIENT_SECRET", "PASSWORD", "PWD", "TOKEN", "ACCESS_TOKEN", "ACCOUNTKEY",
                "SHAREDACCESSKEY", "API_KEY", "SIGNING_KEY", "CREDENTIALS")
BENIGN_WORDS = ("ID", "NAME", "URL", "STATE", "COUNT", "HOST", "PORT", "KEYID", "SINK")

segment = st.from_regex(r"[A-Za-z][A-Za-z0-9]{0,7}", fullmatch=True)
prefix = st.lists(segment, max_size=3).map(lambda parts: "".join(p + "_" for p in parts))
case = st.sampled_from((str.upper, str.lower, str.title))
value = st.from_regex(r"[A-Za-z0-9+/]{12,40}={0,2}", fullmatch=True)
context = st.sampled_from(("{}", "env {} found", "export {}", "a;{};b", "x&{}&y", '"{}"'))


@given(prefix, st.sampled_from(SECRET_WORDS), case, value, context)
def test_a_secret_looking_name_never_leaks_its_value(pre, word, cased, secret, where):
    name = cased(pre + word)
    line = where.format(f"{name}={secret}")
    out = redact(line)
    assert secret not in out
    assert f"{name}=***" in out


@given(prefix, st.sampled_from(BENIGN_WORDS), value)
def test_ordinary_names_keep_their_values(pre, word, plain):
    line = f"{pre}{word}={plain}"
    assert redact(line) == line


def test_azure_client_secret_from_an_env_file_is_scrubbed():
    assert redact("AZURE_CLIENT_SECRET=Qm9ndXMtc2VjcmV0LXZhbHVl") == "AZURE_CLIENT_SECRET=***"
