"""The work queue: de-duplication, per-key serialisation, delays, rate limiting, shutdown."""

from __future__ import annotations

import threading

from nodewright_bridge.metrics import Metrics
from nodewright_bridge.runtime.queueing import WorkQueue
from nodewright_bridge.runtime.ratelimiting import ExponentialBackoff, MaxOf, TokenBucket
from nodewright_bridge.testing import FakeClock


def make_queue(clock: FakeClock, metrics: Metrics | None = None) -> WorkQueue:
    limiter = MaxOf(
        ExponentialBackoff(base=1.0, maximum=60.0), TokenBucket(clock=clock, qps=1, burst=1000)
    )
    return WorkQueue(clock=clock, rate_limiter=limiter, metrics=metrics)


def drain(queue: WorkQueue) -> list[str]:
    keys = []
    while (key := queue.get(timeout=0)) is not None:
        keys.append(key)
        queue.done(key)
    return keys


def test_a_key_added_twice_while_waiting_is_processed_once() -> None:
    queue = make_queue(FakeClock())
    for key in ["a", "b", "a", "a", "c", "b"]:
        queue.add(key)
    assert len(queue) == 3
    assert drain(queue) == ["a", "b", "c"]


def test_a_key_added_while_processing_is_not_handed_out_until_done() -> None:
    queue = make_queue(FakeClock())
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.add("a")
    queue.add("a")
    assert queue.get(timeout=0) is None  # never concurrently
    assert queue.processing() == {"a"}
    queue.done("a")
    assert queue.get(timeout=0) == "a"
    queue.done("a")
    assert queue.get(timeout=0) is None


def test_a_key_that_was_not_re_added_is_gone_after_done() -> None:
    queue = make_queue(FakeClock())
    queue.add("a")
    key = queue.get(timeout=0)
    assert key == "a"
    queue.done(key)
    assert len(queue) == 0
    assert queue.get(timeout=0) is None


def test_a_delayed_key_becomes_ready_only_when_the_clock_reaches_its_time() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add_after("a", 10)
    assert queue.get(timeout=0) is None
    assert queue.delayed() == 1
    clock.advance(9.9)
    assert queue.get(timeout=0) is None
    clock.advance(0.1)
    assert queue.get(timeout=0) == "a"


def test_the_earlier_of_two_delays_for_one_key_wins_and_the_key_comes_once() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add_after("a", 30)
    queue.add_after("a", 5)
    queue.add_after("a", 20)
    clock.advance(5)
    assert drain(queue) == ["a"]
    clock.advance(100)
    assert drain(queue) == []


def test_a_delayed_key_merges_with_the_same_key_already_waiting() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("a")
    queue.add_after("a", 1)
    clock.advance(1)
    assert drain(queue) == ["a"]


def test_zero_delay_adds_immediately() -> None:
    queue = make_queue(FakeClock())
    queue.add_after("a", 0)
    assert queue.get(timeout=0) == "a"


def test_rate_limited_retries_back_off_exponentially_and_forget_resets() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    waits = []
    for _ in range(4):
        queue.add_rate_limited("a")
        start = clock.monotonic()
        while queue.get(timeout=0) is None:
            clock.advance(0.5)
        waits.append(clock.monotonic() - start)
        queue.done("a")
    assert waits == [1.0, 2.0, 4.0, 8.0]
    assert queue.failures("a") == 4
    queue.forget("a")
    assert queue.failures("a") == 0
    queue.add_rate_limited("a")
    clock.advance(1.0)
    assert queue.get(timeout=0) == "a"


def test_after_shutdown_get_returns_none_and_adds_are_ignored() -> None:
    queue = make_queue(FakeClock())
    queue.add("a")
    queue.shutdown()
    assert queue.get(timeout=0) is None
    queue.add("b")
    queue.add_after("c", 1)
    assert len(queue) == 1  # "a" was waiting; it is simply dropped with the queue
    assert queue.shutting_down


def test_shutdown_wakes_a_worker_blocked_in_get() -> None:
    queue = WorkQueue(clock=FakeClock(), rate_limiter=ExponentialBackoff())
    results: list[str | None] = []
    worker = threading.Thread(target=lambda: results.append(queue.get()))
    worker.start()
    queue.shutdown()
    worker.join(timeout=5)
    assert not worker.is_alive()
    assert results == [None]


def test_a_blocked_worker_is_woken_by_an_add() -> None:
    queue = WorkQueue(clock=FakeClock(), rate_limiter=ExponentialBackoff())
    results: list[str | None] = []
    worker = threading.Thread(target=lambda: results.append(queue.get()))
    worker.start()
    queue.add("x")
    worker.join(timeout=5)
    assert results == ["x"]


def test_wait_idle_reports_whether_the_current_item_finished() -> None:
    queue = make_queue(FakeClock())
    queue.add("a")
    key = queue.get(timeout=0)
    assert key is not None
    assert not queue.wait_idle(0)
    queue.done(key)
    assert queue.wait_idle(0)


def test_metrics_count_adds_depth_and_retries() -> None:
    clock = FakeClock()
    metrics = Metrics()
    queue = make_queue(clock, metrics)
    queue.add("a")
    queue.add("b")
    queue.add("a")
    sample = metrics.registry.get_sample_value
    assert sample("nwb_workqueue_adds_total") == 2
    assert sample("nwb_workqueue_depth") == 2
    key = queue.get(timeout=0)
    assert key is not None
    assert sample("nwb_workqueue_depth") == 1
    queue.add_rate_limited(key)
    assert sample("nwb_workqueue_retries_total") == 1


def test_many_keys_keep_their_order_through_internal_compaction() -> None:
    queue = make_queue(FakeClock())
    keys = [f"k{i}" for i in range(5000)]
    for key in keys:
        queue.add(key)
    assert drain(queue) == keys
