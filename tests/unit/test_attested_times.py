"""An attested document's times read by their fields (identity/attested.parse_time) as ``strptime``
reads them: the same moment, or None, for every value of Azure's shape and anything near it."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from se_forwarder.identity.attested import TIME_FORMAT, parse_time


def _strptime(value: str) -> datetime | None:
    try:
        return datetime.strptime(value.strip(), TIME_FORMAT).astimezone(UTC)
    except ValueError:
        return None


def _two() -> st.SearchStrategy[str]:
    return st.integers(0, 99).map(lambda n: f"{n:02d}")


AZURE_SHAPED = st.builds(lambda mo, d, y, h, mi, s, sign, zh, zm: f"{mo}/{d}/{y} {h}:{mi}:{s} {sign}{zh}{zm}",
                         *[_two()] * 6, st.sampled_from("+-"), _two(), _two())


@given(AZURE_SHAPED)
def test_a_value_of_azures_shape_reads_as_strptime_reads_it(value):
    assert parse_time(value) == _strptime(value)


@given(AZURE_SHAPED, st.data())
def test_a_value_near_azures_shape_reads_as_strptime_reads_it(value, data):
    at = data.draw(st.integers(0, len(value)))
    cut = data.draw(st.integers(0, 2))
    inserted = data.draw(st.sampled_from(["", " ", "0", "1", "٣", "Z", ":", "\t", "a"]))
    changed = value[:at] + inserted + value[at + cut:]
    assert parse_time(changed) == _strptime(changed)


def test_azures_example_is_its_moment_in_utc():
    assert parse_time("11/28/18 06:16:17 -0000") == datetime(2018, 11, 28, 6, 16, 17, tzinfo=UTC)
    assert parse_time(" 11/28/18 06:16:17 +0130") == datetime(2018, 11, 28, 4, 46, 17, tzinfo=UTC)
    assert parse_time("02/30/18 06:16:17 -0000") is None
    assert parse_time(None) is None
