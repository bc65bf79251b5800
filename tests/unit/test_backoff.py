"""backoff.py: one schedule type for every retry loop (fixed steps, or exponential with jitter)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from se_forwarder.backoff import MAX_RETRY_AFTER, Backoff


def test_fixed_steps_are_taken_in_order_and_the_last_one_repeats() -> None:
    schedule = Backoff(steps=(1.0, 2.0, 5.0))
    assert [schedule.delay(n) for n in range(1, 6)] == [1.0, 2.0, 5.0, 5.0, 5.0]


def test_next_delay_counts_failures_in_a_row_until_reset() -> None:
    backoff = Backoff(steps=(0.25, 0.5))
    assert [backoff.next_delay(), backoff.next_delay(), backoff.next_delay()] == [0.25, 0.5, 0.5]
    backoff.reset()
    assert backoff.attempt == 0 and backoff.next_delay() == 0.25


@given(st.integers(min_value=1, max_value=1000))
def test_an_exponential_delay_stays_between_base_and_cap(failures: int) -> None:
    assert 0.5 <= Backoff(base=0.5, cap=30.0).delay(failures) <= 30.0


def test_a_retry_after_is_a_floor_up_to_its_maximum() -> None:
    assert Backoff(steps=(1.0,)).delay(1, retry_after=7.0) == 7.0
    assert Backoff(steps=(1.0,)).delay(1, retry_after=10_000.0) == MAX_RETRY_AFTER
    assert Backoff(steps=(9.0,)).delay(1, retry_after=2.0) == 9.0
