"""Bad input: the API server rejects invalid CRs with clear field messages (CRD schema + CEL), and
a node whose state annotation is corrupt is reported and left alone while the others proceed.
(A CR the API accepts whose package cannot work - vars against the role's argument spec, an image
no node can pull - is caught before any node is touched: test_check_before_cordon.py.)"""

from __future__ import annotations

import pytest
from e2e_harness import SIM_REGISTRY, World, wait_for
from kubernetes.client.exceptions import ApiException

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            {"packages": {"tune": {"version": "not-semver", "image": f"{SIM_REGISTRY}/t"}}},
            "version",
        ),
        (
            {"packages": {"X_bad": {"version": "1.0.0", "image": f"{SIM_REGISTRY}/t"}}},
            "packages",
        ),
        (
            {
                "packages": {
                    "tune": {
                        "version": "1.0.0",
                        "image": f"{SIM_REGISTRY}/t",
                        "interrupt": {"type": "explode"},
                    }
                }
            },
            "interrupt",
        ),
    ],
)
def test_the_api_server_rejects_a_bad_cr_with_a_field_message(
    world: World, spec: dict[str, object], expected: str
) -> None:
    with pytest.raises(ApiException) as caught:
        world.apply_cr(world.cr_name("bad"), spec)
    assert caught.value.status == 422
    assert expected in str(caught.value.body)


def test_a_corrupt_node_state_is_reported_and_that_node_left_alone(world: World) -> None:
    good, bad = world.add_nodes(2)
    cr = world.cr_name("corrupt")
    world.core.patch_node(
        bad, {"metadata": {"annotations": {f"bridge.nodewright.io/state-{cr}": "{not json"}}}
    )
    world.apply_cr(
        cr,
        {
            "interruptionBudget": {"count": 2},
            "packages": {"tune": {"version": "1.0.0", "image": f"{SIM_REGISTRY}/tune"}},
        },
    )
    world.start_controller()
    cond = wait_for(
        lambda: (c := world.condition(cr, "NodeStateMalformed")) and c["status"] == "True" and c,
        what="NodeStateMalformed",
    )
    assert bad in cond["message"]
    wait_for(lambda: world.node_status(cr, good) == "complete", what="good node complete")
    assert world.annotations(bad)[f"bridge.nodewright.io/state-{cr}"] == "{not json"
    assert not [p for p in world.package_pods(cr) if p.spec.node_name == bad]
    world.core.patch_node(
        bad, {"metadata": {"annotations": {f"bridge.nodewright.io/state-{cr}": None}}}
    )
    wait_for(lambda: world.cr_status(cr).get("status") == "complete", what="complete after fix")
    assert world.condition(cr, "NodeStateMalformed") is None
