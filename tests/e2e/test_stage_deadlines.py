"""Every wait has a deadline: a package pod that never finishes is ended after ``timeouts.stage``,
and after at most ``maxAttempts`` attempts the node is ``erroring`` with the reason instead of
hanging. (An image that cannot be pulled no longer gets this far: the validation pod reports it
before any node is touched, see test_check_before_cordon.py.)"""

from __future__ import annotations

import threading

import pytest
from e2e_harness import SIM_DURATION_ENV, SIM_REGISTRY, SLOW_TEST_SECONDS, World, wait_for

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(SLOW_TEST_SECONDS)
def test_a_pod_that_never_finishes_ends_erroring_after_the_stage_timeout_and_max_attempts(
    world: World,
) -> None:
    (node,) = world.add_nodes(1)
    cr = world.cr_name("ghost")
    world.apply_cr(
        cr,
        {
            "packages": {
                "ghost": {
                    "version": "1.0.0",
                    "image": f"{SIM_REGISTRY}/ghost",
                    "env": [{"name": SIM_DURATION_ENV, "value": "1h"}],
                    "timeouts": {"stage": "5s"},
                    "maxAttempts": 2,
                }
            }
        },
    )
    pods: set[str] = set()
    phases: set[str] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.2):
            try:
                for pod in world.package_pods(cr):
                    pods.add(pod.metadata.name)
                    phases.add(str(pod.status.phase))
            except Exception:  # a slow API read; sample again
                continue

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    world.start_controller()
    try:
        wait_for(
            lambda: world.node_status(cr, node) == "erroring", what="node erroring", timeout=150
        )
    finally:
        stop.set()
        watcher.join(10)
    entry = world.state(cr, node)["ghost|1.0.0"]
    assert entry["state"] == "erroring"
    assert entry["attempts"] == 2
    assert "did not finish within 5s" in entry["message"], entry
    assert len(pods) == 2, sorted(pods)  # one per attempt, no more
    assert phases <= {"None", "Pending", "Running"}, phases  # never ended by itself
    wait_for(lambda: world.cr_status(cr).get("status") == "erroring", what="CR erroring")
    degraded = world.condition(cr, "Degraded")
    assert degraded is not None and degraded["status"] == "True"
    assert node in degraded["message"] and "did not finish within 5s" in degraded["message"]
    # Given up for good: no third attempt, and the pod that hung is not left behind.
    wait_for(lambda: world.package_pods(cr) == [], what="last pod deleted")
    with pytest.raises(AssertionError):
        wait_for(lambda: world.package_pods(cr), timeout=3, what="no further attempt")
