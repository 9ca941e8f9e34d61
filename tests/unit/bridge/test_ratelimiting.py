"""Rate limiters: per-key exponential back-off, the overall token bucket, and their combination."""

from __future__ import annotations

import pytest

from nodewright_bridge.runtime.ratelimiting import (
    ExponentialBackoff,
    MaxOf,
    TokenBucket,
    default_rate_limiter,
)
from nodewright_bridge.testing import FakeClock


def test_exponential_backoff_doubles_per_failure_up_to_the_cap() -> None:
    limiter = ExponentialBackoff(base=0.5, maximum=5.0)
    assert [limiter.when("a") for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_exponential_backoff_is_per_key_and_forget_resets_one_key() -> None:
    limiter = ExponentialBackoff(base=1.0, maximum=100.0)
    limiter.when("a")
    limiter.when("a")
    assert limiter.when("b") == 1.0
    limiter.forget("a")
    assert limiter.failures("a") == 0
    assert limiter.failures("b") == 1
    assert limiter.when("a") == 1.0


def test_exponential_backoff_survives_a_huge_number_of_failures() -> None:
    limiter = ExponentialBackoff(base=0.005, maximum=1000.0)
    for _ in range(2000):
        delay = limiter.when("a")
    assert delay == 1000.0


def test_token_bucket_allows_the_burst_then_spaces_calls_at_qps() -> None:
    clock = FakeClock()
    bucket = TokenBucket(clock=clock, qps=2.0, burst=3)
    assert [bucket.when("x") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert [bucket.when("x") for _ in range(3)] == [0.5, 1.0, 1.5]


def test_token_bucket_refills_with_time_but_never_above_the_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(clock=clock, qps=1.0, burst=2)
    bucket.when("x")
    bucket.when("x")
    clock.advance(1000)
    assert [bucket.when("x") for _ in range(3)] == [0.0, 0.0, 1.0]


def test_max_of_takes_the_longest_delay_and_records_in_every_limiter() -> None:
    clock = FakeClock()
    backoff = ExponentialBackoff(base=1.0, maximum=100.0)
    limiter = MaxOf(backoff, TokenBucket(clock=clock, qps=0.1, burst=1))
    assert limiter.when("a") == 1.0  # bucket had a token; back-off says 1 s
    assert limiter.when("b") == pytest.approx(10.0)  # bucket empty: 10 s at 0.1 qps
    assert limiter.failures("a") == 1
    limiter.forget("a")
    assert backoff.failures("a") == 0


def test_default_limiter_starts_at_five_milliseconds() -> None:
    limiter = default_rate_limiter(FakeClock())
    assert limiter.when("a") == pytest.approx(0.005)
    assert limiter.when("a") == pytest.approx(0.010)


@pytest.mark.parametrize(("base", "maximum"), [(0.0, 1.0), (2.0, 1.0), (-1.0, 5.0)])
def test_exponential_backoff_rejects_nonsense_bounds(base: float, maximum: float) -> None:
    with pytest.raises(ValueError, match="base"):
        ExponentialBackoff(base=base, maximum=maximum)
