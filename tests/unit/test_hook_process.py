"""The hook process's spool and environment, as pure functions."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from se_forwarder.approvals.hook_process import Spool, environment


@given(st.lists(st.binary(max_size=300), max_size=40), st.integers(min_value=1, max_value=1000))
def test_spool_keeps_exactly_the_last_bytes_and_counts_the_rest(chunks, limit):
    spool = Spool(limit)
    for chunk in chunks:
        spool.write(chunk)
    everything = b"".join(chunks)
    assert spool.dropped == max(0, len(everything) - limit)
    kept = everything[spool.dropped:]
    assert len(kept) <= limit
    if spool.dropped:
        assert spool.note() == (f"; {spool.dropped} bytes of output dropped (only the last {limit} "
                                "bytes are kept)")
    else:
        assert spool.note() == "" and spool.text() == everything.decode("utf-8", "replace")


def test_spool_text_starts_at_a_whole_line_after_a_drop():
    spool = Spool(16)
    spool.write(b"first line\nsecond\nthird\n")
    assert spool.text() == "second\nthird\n"  # "ne\n", the rest of a cut line, is left out


names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)


@given(st.dictionaries(names, st.text(max_size=5), max_size=12), st.lists(names, max_size=4),
       st.lists(names, max_size=4))
def test_environment_passes_only_the_allow_list_and_never_a_secret(source, allowed, secrets):
    own = {"SE_HOOK": "prepare"}
    env = environment(source, allowed, secrets, own)
    for name, value in env.items():
        if name in own:
            assert value == own[name]
            continue
        assert name not in secrets
        assert source[name] == value
        assert (name in ("PATH", "LANG", "TZ") or name.startswith(("LC_", "SE_"))
                or name in allowed)
    for name in ("PATH", "LANG", "TZ", *allowed):
        if name in source and name not in secrets and name not in own:
            assert env[name] == source[name]
