"""Pure parts of the simulated kubelet: the simulate runner's outcomes, downward-API values,
$(VAR) expansion, the per-pod sync queue, and `nwb sandbox up --labels` parsing."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lifecycle.results import parse_termination_message
from lifecycle.validating import VALIDATION_LABEL, parse_result
from nodewright_bridge.commands.sandbox import parse_labels
from nodewright_bridge.sandbox.kubelet.kubelet import SyncQueue
from nodewright_bridge.sandbox.kubelet.nodes import SimNode
from nodewright_bridge.sandbox.kubelet.runners import (
    DURATION_ANNOTATION,
    EXIT_CODE_ANNOTATION,
    KILLED_EXIT_CODE,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    ContainerSpec,
    SimulateRunner,
    VolumeKind,
    VolumeMount,
)
from nodewright_bridge.sandbox.kubelet.volumes import expand, field_value

NODE = SimNode(name="n1", labels={}, state_dir=Path("/nonexistent"))
PACKAGE = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, "bridge.nodewright.io/package": "ntp"}


def _spec(**kw: object) -> ContainerSpec:
    return ContainerSpec("ns", "p", "uid", "n1", "c", "img", **kw)  # type: ignore[arg-type]


def test_a_workload_container_runs_until_killed() -> None:
    running = SimulateRunner().start(NODE, _spec())
    assert running.poll() is None
    running.kill()
    assert running.poll() == KILLED_EXIT_CODE
    assert running.termination_message() == ""


def test_a_package_container_ends_with_a_successful_agent_result_by_default() -> None:
    notes = {DURATION_ANNOTATION: "0s"}
    running = SimulateRunner().start(NODE, _spec(pod_labels=PACKAGE, pod_annotations=notes))
    assert running.poll() == 0
    result = parse_termination_message(running.termination_message())
    assert result.succeeded and result.package == "ntp"


def test_a_validation_container_ends_with_a_passed_validation_by_default() -> None:
    labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, VALIDATION_LABEL: "ntp"}
    notes = {DURATION_ANNOTATION: "0s"}
    spec = _spec(pod_labels=labels, pod_annotations=notes, env={"NW_VERSION": "1.2.0"})
    running = SimulateRunner().start(NODE, spec)
    assert running.poll() == 0
    result = parse_result(running.termination_message())
    assert result.passed and (result.package, result.version) == ("ntp", "1.2.0")


def test_a_package_container_takes_its_duration_and_exit_code_from_annotations() -> None:
    notes = {DURATION_ANNOTATION: "300ms", EXIT_CODE_ANNOTATION: "2"}
    running = SimulateRunner().start(NODE, _spec(pod_labels=PACKAGE, pod_annotations=notes))
    assert running.poll() is None
    time.sleep(0.35)
    assert running.poll() == 2


def test_a_job_like_workload_pod_ends_after_its_duration() -> None:
    notes = {DURATION_ANNOTATION: "0s"}
    spec = _spec(pod_annotations=notes, restart_policy="Never")
    assert SimulateRunner().start(NODE, spec).poll() == 0


def test_a_host_path_mount_resolves_inside_the_node_root_only(tmp_path: Path) -> None:
    mount = VolumeMount("host", VolumeKind.HOST_PATH, "/host", host_path="/", sub_path="etc")
    without_root = SimNode(name="a", labels={}, state_dir=tmp_path)
    assert mount.resolve(without_root) is None
    with_root = SimNode(name="b", labels={}, state_dir=tmp_path, root_dir=tmp_path / "root")
    assert mount.resolve(with_root) == tmp_path / "root" / "etc"


def test_downward_api_values_come_from_the_pod() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"a": "1"}},
        "spec": {"nodeName": "n1"},
    }
    assert field_value(pod, "spec.nodeName", "172.16.0.1", "10.1.1.1") == "n1"
    assert field_value(pod, "metadata.labels['a']", "", "") == "1"
    assert field_value(pod, "status.podIP", "172.16.0.1", "10.1.1.1") == "10.1.1.1"
    assert field_value(pod, "metadata.labels", "", "") == 'a="1"'


def test_variable_references_expand_like_the_kubelets() -> None:
    env = {"A": "x", "B": "y"}
    assert expand("$(A)-$(B)-$(C)", env) == "x-y-$(C)"
    assert expand("$$(A)", env) == "$(A)"


def test_a_sync_queue_never_runs_one_key_twice_at_once_and_reruns_after_a_kick() -> None:
    active: dict[str, int] = {}
    overlaps: list[str] = []
    runs: list[str] = []
    lock = threading.Lock()
    gate = threading.Event()

    def work(key: str) -> None:
        with lock:
            active[key] = active.get(key, 0) + 1
            if active[key] > 1:
                overlaps.append(key)
            runs.append(key)
        gate.wait(1)
        with lock:
            active[key] -= 1

    with ThreadPoolExecutor(4) as pool:
        queue = SyncQueue(pool, work)
        queue.kick("a")
        time.sleep(0.05)
        queue.kick("a")  # while running: one rerun
        queue.kick("a")  # coalesced into the same rerun
        queue.kick("b")
        time.sleep(0.05)
        gate.set()
        time.sleep(0.2)
    assert overlaps == []
    assert sorted(runs) == ["a", "a", "b"]


def test_node_labels_parse_and_bad_entries_are_reported_by_position() -> None:
    assert parse_labels("zone=a, tier=web,") == ({"zone": "a", "tier": "web"}, [])
    labels, problems = parse_labels("zone=a,oops,=x")
    assert labels == {"zone": "a"}
    assert problems == [
        "--labels[1]: expected key=value, got 'oops'",
        "--labels[2]: expected key=value, got '=x'",
    ]
