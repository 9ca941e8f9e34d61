"""What keeps the controller's memory down at thousands of nodes: cached objects share their
strings and keep only what is read, the process caps its malloc arenas and tunes the cycle
collector, and the memory dump (``NWB_MEMDUMP``) says where the rest goes."""

from __future__ import annotations

import gc
import json
import tracemalloc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodewright_bridge.controller import snapshot
from nodewright_bridge.k8s.slimming import shared, slim_node, slim_pod
from nodewright_bridge.runtime import allocator, collector, memdump


def _node(name: str) -> bytes:
    """A Node as one watch event carries it: decoded on its own, so no string is shared."""
    return json.dumps(
        {
            "metadata": {
                "name": name,
                "uid": f"uid-{name}",
                "resourceVersion": "7",
                "labels": {"kubernetes.io/os": "linux", "fleet": "a"},
                "annotations": {"bridge.nodewright.io/state-x": '{"pkg|1.0.0":{"state":"x"}}'},
            },
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasMemory"},
                    {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"},
                ],
                "nodeInfo": {"bootID": "b"},
            },
        }
    ).encode()


def test_nodes_decoded_apart_share_their_keys_and_common_values() -> None:
    one, two = (slim_node(json.loads(_node(n))) for n in ("n1", "n2"))
    assert one["metadata"]["labels"] == two["metadata"]["labels"]
    state_key = "bridge.nodewright.io/state-x"
    assert one["metadata"]["annotations"][state_key] is two["metadata"]["annotations"][state_key]
    label_key_one = next(iter(one["metadata"]["labels"]))
    label_key_two = next(iter(two["metadata"]["labels"]))
    assert label_key_one is label_key_two
    os_one, os_two = (n["metadata"]["labels"]["kubernetes.io/os"] for n in (one, two))
    assert os_one is os_two


def test_a_slim_node_keeps_only_the_ready_condition_whole() -> None:
    slim = slim_node(json.loads(_node("n1")))
    assert slim["status"]["conditions"] == [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}
    ]
    assert slim["metadata"]["uid"] == "uid-n1"
    assert slim["status"]["nodeInfo"] == {"bootID": "b"}


def test_a_slim_pod_keeps_no_condition_but_its_phase_and_container_state() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"nodeName": "n1"},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "agent", "state": {"running": {"startedAt": "t"}}}],
        },
    }
    slim = slim_pod(pod)
    assert slim["status"] == {
        "phase": "Running",
        "containerStatuses": [{"name": "agent", "state": {"running": {"startedAt": "t"}}}],
    }


def test_shared_keeps_the_value_and_its_types() -> None:
    value = json.loads('{"a": [1, "x", {"b": null, "c": true}], "uid": "u", "d": 2.5}')
    assert shared(value) == value


def test_an_operators_malloc_arena_max_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert allocator.limit_arenas() is False


def test_arenas_are_capped_on_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert allocator.limit_arenas() is True


def test_no_memdump_without_its_variable() -> None:
    assert memdump.install(None) is False
    assert memdump.install("") is False


def test_a_dump_tells_rss_mappings_and_allocator_totals(tmp_path: Path) -> None:
    target = tmp_path / "mem.txt"
    memdump.dump(target)
    memdump.dump(target)
    text = target.read_text()
    assert text.count("== ") == 2
    assert "VmRSS:" in text and "VmHWM:" in text
    assert "rss by mapping: heap" in text
    assert "pymalloc bytes in allocated blocks" in text


def test_a_traced_dump_lists_allocation_sites(tmp_path: Path) -> None:
    target = tmp_path / "mem.txt"
    tracemalloc.start(1)
    try:
        kept = [{"n": i} for i in range(2000)]
        memdump.dump(target)
    finally:
        tracemalloc.stop()
    text = target.read_text()
    assert "traced" in text
    assert f"{Path(__file__).name}:" in text
    assert len(kept) == 2000


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_free_pages_inside_the_heap_go_back_after_release_free() -> None:
    # 64 KiB blocks come from the heap (below the mmap threshold); freeing every other one
    # leaves holes that glibc keeps resident by itself
    blocks = [bytearray(64 * 1024) for _ in range(512)]
    del blocks[::2]
    before = _rss_kb()
    assert allocator.release_free() is True
    assert before - _rss_kb() > 8 * 1024
    assert len(blocks) == 256


def test_the_pods_of_one_batch_share_the_entry_they_carry() -> None:
    entry = '{"stage":"apply","state":"in_progress","attempts":1,"resourceId":"r1"}'
    one, two = (snapshot.parse_entry("".join(list(entry))) for _ in range(2))  # decoded apart
    assert one is not None and one is two
    assert one.attempts == 1 and one.resource_id == "r1"
    assert snapshot.parse_entry('{"stage": 7}') is None  # unreadable: the node does not record it
    assert snapshot.parse_entry(None) is None


@pytest.fixture
def restored_collector() -> Iterator[None]:
    """``collector.tune`` changes the whole process: give the next test CPython's settings."""
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restored_collector")
def test_the_tuned_collector_freezes_the_startup_heap_and_collects_young_rarely() -> None:
    collector.tune()
    assert gc.get_threshold() == (
        collector.YOUNG_THRESHOLD,
        collector.MIDDLE_THRESHOLD,
        collector.OLD_THRESHOLD,
    )
    assert gc.get_freeze_count() > 10_000  # modules, classes and functions are out of its view


class _Cyclic:
    def __init__(self) -> None:
        self.me = self


@pytest.mark.usefixtures("restored_collector")
def test_cycles_made_after_tuning_are_still_collected_without_an_explicit_collect() -> None:
    collector.tune()
    cycle = _Cyclic()
    gone = weakref.ref(cycle)
    del cycle
    # A young run normally takes it. Another thread's allocations may have run one while it was
    # still referenced, which moves it to the middle generation: that one is collected after
    # MIDDLE_THRESHOLD young runs, so keep allocating up to one more than that.
    kept: list[list[list[int]]] = []
    while gone() is not None and len(kept) <= collector.MIDDLE_THRESHOLD + 1:
        kept.append([[] for _ in range(collector.YOUNG_THRESHOLD + 1)])
    assert gone() is None
    assert kept  # nothing collected it before new objects were made
