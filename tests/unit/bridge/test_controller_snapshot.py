"""Turning cached API objects into planner inputs never crashes on bad input."""

from __future__ import annotations

import json

import pytest

from lifecycle.nodestate import PackageState, Stage, StageState
from lifecycle.spec import NodeWright
from lifecycle.stages import PodPhase
from nodewright_bridge.controller import snapshot
from nodewright_bridge.k8s import slimming, store


def test_an_invalid_cr_becomes_field_path_problems_instead_of_an_exception() -> None:
    obj = {
        "metadata": {"name": "bad", "generation": 3},
        "spec": {"nodeSelectors": {}, "packages": {"pkg": {"version": "nope", "image": "x/y"}}},
    }
    parsed = snapshot.parse_nodewright(obj)
    assert isinstance(parsed, snapshot.InvalidCR)
    assert parsed.generation == 3
    assert any("version" in line for line in parsed.problems)


def test_a_corrupt_state_annotation_raises_value_error_and_a_good_one_round_trips() -> None:
    with pytest.raises(ValueError):
        snapshot.parse_state("{not json")
    with pytest.raises(ValueError):
        snapshot.parse_state('{"p|1.0.0": {"stage": "warp", "state": "complete"}}')
    state = {"p|1.0.0": PackageState(stage=Stage.CONFIG, state=StageState.COMPLETE, attempts=1)}
    assert snapshot.parse_state(snapshot.dump_state(state)) == state


def package_pod(message: str | None, phase: str = "Succeeded") -> dict[str, object]:
    terminated: dict[str, object] = {"exitCode": 0 if phase == "Succeeded" else 2}
    if message is not None:
        terminated["message"] = message
    return {
        "metadata": {
            "name": "nw-a",
            "labels": {
                "bridge.nodewright.io/package": "p",
                "bridge.nodewright.io/version": "1.0.0",
                "bridge.nodewright.io/stage": "apply",
            },
            "annotations": {
                "bridge.nodewright.io/stages": "apply,apply-check,config,config-check",
                "bridge.nodewright.io/attempt": "2",
            },
        },
        "status": {
            "phase": phase,
            "containerStatuses": [{"name": "agent", "state": {"terminated": terminated}}],
        },
    }


def test_a_package_pod_is_observed_with_its_stages_attempt_and_agent_result() -> None:
    result = {"v": 1, "package": "p", "version": "1.0.0", "failure": None}
    pod = snapshot.observe_pod(package_pod(json.dumps(result)))
    assert pod is not None
    assert pod.stages == ("apply", "apply-check", "config", "config-check")
    assert pod.attempt == 2 and pod.phase is PodPhase.SUCCEEDED and not pod.interrupt
    assert pod.result is not None and pod.result.failure is None


def test_garbage_in_a_termination_message_is_kept_as_an_unparseable_result() -> None:
    pod = snapshot.observe_pod(package_pod("segfault!", phase="Failed"))
    assert pod is not None and pod.result is not None and pod.result.unparseable


def test_a_failed_pod_without_a_message_still_explains_itself() -> None:
    pod = snapshot.observe_pod(package_pod(None, phase="Failed"))
    assert pod is not None and pod.result is not None
    assert "exit code 2" in pod.result.raw


def test_drain_facts_of_a_workload_pod_are_read_from_the_slim_object() -> None:
    view = snapshot.pod_view(
        {
            "metadata": {
                "namespace": "ns",
                "name": "w",
                "ownerReferences": [{"kind": "ReplicaSet", "controller": True}],
            },
            "spec": {"volumes": [{"name": "scratch", "emptyDir": {}}]},
            "status": {"phase": "Running"},
        }
    )
    assert view.controller_kind == "ReplicaSet" and view.uses_empty_dir and not view.deleting


def test_a_secret_is_cached_as_digests_and_its_data_never_kept() -> None:
    raw = {
        "metadata": {"name": "token", "namespace": "nodewright-system", "resourceVersion": "7"},
        "data": {"password": "aHVudGVyMg==", "user": "YWRtaW4="},
        "type": "Opaque",
    }
    slim = slimming.slim_secret(raw)
    assert set(slim["digests"]) == {"password", "user"}
    assert "aHVudGVyMg==" not in json.dumps(slim)
    assert "data" not in slim


def test_secret_data_digests_change_with_the_referenced_key_only() -> None:
    secrets = store.Store()
    ns = "nodewright-system"

    def put(password: str, user: str) -> None:
        secrets.put(
            f"{ns}/token",
            slimming.slim_secret(
                {"metadata": {"name": "token", "namespace": ns}, "data": {"p": password, "u": user}}
            ),
        )

    cr = NodeWright.model_validate(
        {
            "metadata": {"name": "c"},
            "spec": {
                "packages": {
                    "whole": {
                        "version": "1.0.0",
                        "image": "r/w",
                        "secretVars": [{"secretName": "token"}],
                    },
                    "one": {
                        "version": "1.0.0",
                        "image": "r/o",
                        "secretVars": [{"secretName": "token", "key": "p"}],
                    },
                    "none": {"version": "1.0.0", "image": "r/n"},
                }
            },
        }
    )
    missing = snapshot.secret_data(cr, secrets, ns)
    assert set(missing) == {"whole", "one"}
    put("a", "b")
    first = snapshot.secret_data(cr, secrets, ns)
    assert first["whole"] != missing["whole"]
    put("a", "changed")
    second = snapshot.secret_data(cr, secrets, ns)
    assert second["one"] == first["one"] and second["whole"] != first["whole"]


def test_the_node_facts_name_the_pdbs_and_pods_that_block_a_drain() -> None:
    cr = NodeWright.model_validate(
        {
            "metadata": {"name": "tune"},
            "spec": {"packages": {"tune": {"version": "1.0.0", "image": "registry.local/tune"}}},
        }
    )

    def pod(name: str, labels: dict[str, str], owned: bool) -> dict[str, object]:
        refs = [{"kind": "ReplicaSet", "controller": True}] if owned else []
        return {
            "metadata": {
                "namespace": "shop",
                "name": name,
                "labels": labels,
                "ownerReferences": refs,
            },
            "spec": {"nodeName": "n1"},
            "status": {"phase": "Running"},
        }

    pdb = {
        "metadata": {"namespace": "shop", "name": "web-pdb"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 0},
    }
    node = {"metadata": {"name": "n1"}, "spec": {}, "status": {}}
    stores = snapshot.stores_from(
        nodes=[node],
        pods=[pod("web-1", {"app": "web"}, owned=True), pod("lone", {}, owned=False)],
        pdbs=[pdb],
    )
    snap = snapshot.snapshot_node(cr, node, stores, snapshot.PdbIndex.of([pdb]))
    assert snap.facts.blocking_pdbs == ("shop/web-pdb",)
    assert snap.facts.unevictable_pods == 1  # no controller, no drain.force
    assert snap.blocking_pdbs == snap.facts.blocking_pdbs


def validation_pod(cr: str, node: str, phase: str = "Running") -> dict[str, object]:
    return {
        "metadata": {
            "name": f"nwv-{cr}",
            "namespace": "nodewright-system",
            "labels": {
                "app.kubernetes.io/managed-by": "nodewright-bridge",
                "bridge.nodewright.io/cr": cr,
                "bridge.nodewright.io/validate": "pp",
            },
            "annotations": {"bridge.nodewright.io/validation-key": "k"},
        },
        "spec": {"nodeName": node},
        "status": {"phase": phase},
    }


def test_validation_pods_are_neither_this_crs_package_pods_nor_another_crs() -> None:
    cr = NodeWright.model_validate(
        {
            "metadata": {"name": "mine"},
            "spec": {"packages": {"pp": {"version": "1.0.0", "image": "r/p"}}},
        }
    )
    node = {"metadata": {"name": "n1"}, "status": {"nodeInfo": {"bootID": "b"}}}
    stores = snapshot.stores_from(
        nodes=[node], pods=[validation_pod("mine", "n1"), validation_pod("other", "n1")]
    )
    snap = snapshot.snapshot_node(cr, node, stores, snapshot.PdbIndex())
    assert snap.pods == (), "the stage planner would delete a pod it does not know"
    assert snap.facts.foreign_package_pods == 0, "a validation pod does not hold interrupts back"
    assert snapshot.observe_pod(validation_pod("mine", "n1")) is None
