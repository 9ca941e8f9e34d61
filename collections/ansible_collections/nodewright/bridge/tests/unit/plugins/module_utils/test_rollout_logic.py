# -*- coding: utf-8 -*-
# Copyright: nodewright-bridge contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Argument handling and status reading of the rollout modules (pure, no cluster)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.nodewright.bridge.plugins.module_utils import client
from ansible_collections.nodewright.bridge.plugins.module_utils import rollout as logic


def params(**kw):
    base = dict((k, None) for k in logic.ROLLOUT_FIELDS)
    base.update(name="gpu-tuning", node_selector=None)
    base.update(kw)
    return base


def test_module_arguments_become_a_camel_case_nodewright_without_touching_user_data():
    body = logic.rollout_body(
        params(
            node_selector={"nvidia.com/gpu.product": "A100"},
            deployment_policy="canary",
            packages={
                "sysctl-tuning": {
                    "version": "1.2.0",
                    "image": "127.0.0.1:5000/pkgs/sysctl-tuning",
                    "vars": {"sysctl_settings": {"vm.swappiness": 10}},
                    "depends_on": {"base_pkg": "1.0.0"},
                    "max_attempts": 2,
                    "config_interrupts": {"sysctl_*": {"type": "noop"}},
                }
            },
            drain={"delete_empty_dir_data": False, "pod_selector": {"match_labels": {"a_b": "c"}}},
        )
    )
    spec = body["spec"]
    assert body["kind"] == "NodeWright" and body["metadata"] == {"name": "gpu-tuning"}
    assert spec["nodeSelectors"] == {"matchLabels": {"nvidia.com/gpu.product": "A100"}}
    assert spec["deploymentPolicy"] == "canary"
    pkg = spec["packages"]["sysctl-tuning"]
    assert pkg["vars"] == {"sysctl_settings": {"vm.swappiness": 10}}
    assert pkg["dependsOn"] == {"base_pkg": "1.0.0"}
    assert pkg["maxAttempts"] == 2
    assert pkg["configInterrupts"] == {"sysctl_*": {"type": "noop"}}
    assert spec["drain"] == {"deleteEmptyDirData": False, "podSelector": {"matchLabels": {"a_b": "c"}}}


def test_policy_arguments_become_a_deployment_policy():
    body = logic.policy_body(
        dict(
            name="canary",
            default={"budget": {"percent": 10}, "strategy": {"fixed": {"initial_batch": 1}}},
            compartments=[
                {
                    "name": "a100",
                    "selector": {"match_labels": {"gpu_type": "a100"}},
                    "budget": {"count": 4},
                    "strategy": {"exponential": {"initial_batch": 1, "growth_factor": 2}},
                }
            ],
            reset_batch_state_on_completion=False,
        )
    )
    comp = body["spec"]["compartments"][0]
    assert comp["selector"] == {"matchLabels": {"gpu_type": "a100"}}
    assert comp["strategy"] == {"exponential": {"initialBatch": 1, "growthFactor": 2}}
    assert body["spec"]["default"]["strategy"] == {"fixed": {"initialBatch": 1}}
    assert body["spec"]["resetBatchStateOnCompletion"] is False


def test_defaults_filled_in_by_the_api_server_are_not_a_change():
    desired = {"spec": {"packages": {"p": {"version": "1.0.0"}}}}
    live = {"spec": {"packages": {"p": {"version": "1.0.0", "maxAttempts": 3}}, "priority": 200}}
    assert not logic.spec_changed(live, desired)
    assert logic.spec_changed(live, {"spec": {"packages": {"p": {"version": "1.0.1"}}}})
    assert logic.spec_changed(None, desired)


def cr(conditions, generation=2, observed=2):
    return {
        "metadata": {"name": "x", "generation": generation},
        "status": {"observedGeneration": observed, "conditions": conditions},
    }


def test_ready_for_the_current_generation_finishes_the_wait():
    done = logic.rollout_outcome(cr([{"type": "Ready", "status": "True", "message": "3/3"}]))
    assert done == (True, False, "3/3")


def test_ready_for_an_old_generation_keeps_waiting():
    outcome = logic.rollout_outcome(
        cr([{"type": "Ready", "status": "True"}], generation=3, observed=2)
    )
    assert outcome[0] is False


def test_a_stalled_or_degraded_rollout_fails_with_the_controllers_message():
    message = "node n1 package sysctl-tuning 1.2.0 stage apply-check task 'verify swappiness': 60 != 10"
    finished, failed, text = logic.rollout_outcome(
        cr([{"type": "Ready", "status": "False"}, {"type": "Degraded", "status": "True", "message": message}])
    )
    assert finished and failed
    assert "verify swappiness" in text and text.startswith("Degraded")


def test_a_stalled_and_degraded_rollout_names_the_failed_task_before_the_stopped_compartment():
    finished, failed, text = logic.rollout_outcome(
        cr(
            [
                {"type": "Stalled", "status": "True", "message": "__default__: 1 failure(s) >= failureThreshold 1"},
                {"type": "Degraded", "status": "True", "message": "node n1, package probe 1.0.0, stage apply, "
                 "task 'The probe verifies': probe verify failed on purpose"},
            ]
        )
    )
    assert finished and failed
    assert text.startswith("Degraded: node n1") and "The probe verifies" in text
    assert "Stalled: __default__" in text


def test_failure_conditions_of_an_older_generation_keep_the_wait_going():
    outcome = logic.rollout_outcome(
        cr([{"type": "Degraded", "status": "True", "message": "old failure"}], generation=3, observed=2)
    )
    assert outcome == (False, False, "waiting for the controller to observe generation 3")


def test_a_rollout_without_status_yet_keeps_waiting():
    fresh = {"metadata": {"name": "x", "generation": 1}}
    assert logic.rollout_outcome(fresh)[:2] == (False, False)


def test_node_results_come_from_the_node_annotations():
    nodes = [
        {
            "metadata": {
                "name": "n1",
                "annotations": {
                    "bridge.nodewright.io/state-x": json.dumps({"p|1.0.0": {"stage": "config", "state": "complete"}}),
                    "bridge.nodewright.io/status-x": "complete",
                },
            }
        },
        {"metadata": {"name": "other", "annotations": {}}},
    ]
    assert logic.node_results(nodes, "x") == {
        "n1": {"status": "complete", "packages": {"p|1.0.0": {"stage": "config", "state": "complete"}}}
    }


def test_pause_patch_sets_and_removes_the_annotation():
    assert logic.pause_patch("x", True)["metadata"]["annotations"] == {"bridge.nodewright.io/pause": "true"}
    assert logic.pause_patch("x", False)["metadata"]["annotations"] == {"bridge.nodewright.io/pause": None}


def test_auth_options_fall_back_to_the_kubernetes_core_environment_names():
    opts = client.auth_options(
        dict(kubeconfig=None, context="ctx", host=None, api_key=None, validate_certs=None, ca_cert=None),
        environ={"K8S_AUTH_KUBECONFIG": "/k", "K8S_AUTH_CONTEXT": "env", "K8S_AUTH_VERIFY_SSL": "no"},
    )
    assert opts["kubeconfig"] == "/k"
    assert opts["context"] == "ctx"
    assert opts["validate_certs"] is False


def test_api_errors_report_the_api_servers_message():
    class Exc(Exception):
        status = 422
        reason = "Unprocessable Entity"
        body = json.dumps({"message": "spec.packages.x.version: Invalid value: must be semver"})

    assert client.api_error_message(Exc()) == "spec.packages.x.version: Invalid value: must be semver"


def test_erroring_packages_on_the_nodes_are_spelled_out_for_a_failed_wait():
    states = {
        "n2": {"status": "erroring", "packages": {"probe|1.0.0": {"stage": "apply", "state": "erroring", "message": "verify failed"}}},
        "n1": {"status": "complete", "packages": {"probe|1.0.0": {"stage": "config", "state": "complete"}}},
    }
    assert logic.erroring_details(states) == ["node n2, package probe 1.0.0, stage apply: verify failed"]


def test_erroring_details_are_bounded():
    states = dict(
        ("n%d" % i, {"packages": {"p|1.0.0": {"stage": "apply", "state": "erroring", "message": "x"}}}) for i in range(8)
    )
    lines = logic.erroring_details(states, limit=3)
    assert len(lines) == 4 and lines[-1] == "... and 5 more"
