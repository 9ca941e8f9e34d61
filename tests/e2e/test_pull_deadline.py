"""A package image that a node cannot pull makes that node erroring at the controller's pull
deadline (``nwb controller --image-pull-deadline``), long before the stage timeout, with the
outside cause ``image-pull`` that the recovery rules re-attempt. (The validation pod pulled the
image on another node: an image no node can pull never reaches a node, see
test_check_before_cordon.py.)"""

from __future__ import annotations

from datetime import timedelta

import pytest
from e2e_harness import FLAKY_REGISTRY, World, wait_for

from lifecycle.recovery import OutsideRetry

pytestmark = pytest.mark.e2e


def test_an_unpullable_image_is_the_nodes_erroring_reason_at_the_pull_deadline(
    world: World,
) -> None:
    first, node = world.add_nodes(2)
    assert world.env.runner is not None
    world.env.runner.failing_pulls.add(node)
    cr = world.cr_name("ghost")
    pkg = {
        "version": "1.0.0",
        "image": f"{FLAKY_REGISTRY}/ghost",
        "timeouts": {"stage": "30m"},  # far away: only the pull deadline can end this
        "maxAttempts": 3,
    }
    world.apply_cr(cr, {"interruptionBudget": {"count": 2}, "packages": {"ghost": pkg}})
    world.start_controller(outside_retry=OutsideRetry(pull_deadline=timedelta(seconds=3)))
    wait_for(lambda: world.node_status(cr, node) == "erroring", what="node erroring", timeout=60)
    entry = world.state(cr, node)["ghost|1.0.0"]
    assert entry["cause"] == "image-pull", entry
    assert entry["attempts"] == 1, entry  # not retried in place: the image will not appear
    message = entry["message"]
    assert "ErrImagePull" in message or "ImagePullBackOff" in message, message
    assert f"{FLAKY_REGISTRY}/ghost" in message and "within 3s" in message, message
    assert "re-attempt at" in message, message
    world.await_condition(cr, "Degraded", lambda c: "could not start within 3s" in c["message"])
    wait_for(lambda: not world.package_pods(cr), what="the stuck pod deleted")
    assert world.node_status(cr, first) == "complete"
    world.env.runner.failing_pulls.discard(node)
