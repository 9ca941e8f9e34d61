#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: nodewright-bridge contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: rollout
short_description: Create, update, pause, resume or delete a NodeWright rollout and wait for it
version_added: 0.1.0
description:
  - Manages a C(NodeWright) custom resource (C(bridge.nodewright.io/v1alpha1)), which runs Ansible
    roles packaged as NodeWright packages on the Kubernetes nodes it selects, with cordon, drain,
    PodDisruptionBudget checks and canary batches.
  - With O(wait=true) the task waits until every targeted node is complete, and fails with the
    controller's message (node, package, stage, task, error) when a compartment stalls or a
    package fails validation.
  - In check mode the object is sent to the API server as a dry run, so schema and CEL validation
    errors are reported without changing anything.
author:
  - nodewright-bridge maintainers (@nodewright)
extends_documentation_fragment:
  - nodewright.bridge.connection
  - nodewright.bridge.connection.WAIT
options:
  name:
    description: Name of the NodeWright object (cluster-scoped, at most 50 characters).
    type: str
    required: true
  state:
    description:
      - V(present) creates or updates the rollout; V(absent) deletes it (the controller then
        cleans up node state); V(paused) and V(resumed) set or remove the pause annotation.
    type: str
    choices: [present, absent, paused, resumed]
    default: present
  packages:
    description:
      - Packages by name. Each takes C(version), C(image), and optionally C(digest), C(vars),
        C(interrupt), C(depends_on), C(config_map), C(config_interrupts), C(timeouts),
        C(max_attempts), C(uninstall) (snake_case or camelCase keys).
    type: dict
  node_selector:
    description: Shorthand for O(node_selectors) with only C(matchLabels).
    type: dict
  node_selectors:
    description: Full label selector for the targeted nodes (C(match_labels), C(match_expressions)).
    type: dict
  deployment_policy:
    description: Name of a DeploymentPolicy that sets compartments and canary batches.
    type: str
  interruption_budget:
    description: Legacy batch size, C(percent) or C(count); exclusive with O(deployment_policy).
    type: dict
  pod_non_interrupt_labels:
    description: Pods matching this selector must finish before a node is drained.
    type: dict
  additional_tolerations:
    description: Tolerations added to package pods and to the node taint check.
    type: list
    elements: dict
  priority:
    description: Lower runs first across rollouts.
    type: int
  sequencing:
    description: Whether later rollouts wait per node or for all nodes of this one.
    type: str
    choices: [node, all]
  runtime_required:
    description: Nodes keep the runtime-required taint until this rollout completes on them.
    type: bool
  auto_taint_new_nodes:
    description: Taint new nodes with the runtime-required taint.
    type: bool
  drain:
    description: Drain options C(timeout), C(delete_empty_dir_data), C(force), C(pod_selector).
    type: dict
  host_connection:
    description: How the agent reaches the host.
    type: str
    choices: [chroot, nsenter]
"""

EXAMPLES = r"""
- name: Roll out sysctl tuning to the A100 nodes in canary batches and wait
  nodewright.bridge.rollout:
    name: gpu-tuning
    node_selector:
      nvidia.com/gpu.product: A100
    deployment_policy: canary
    packages:
      sysctl-tuning:
        version: 1.2.0
        image: registry.example.com/pkgs/sysctl-tuning
        vars:
          sysctl_settings:
            vm.swappiness: 10
    wait: true
    wait_timeout: 7200

- name: Pause it
  nodewright.bridge.rollout:
    name: gpu-tuning
    state: paused
"""

RETURN = r"""
rollout:
  description: Summary of the rollout after the task (status, counts, compartments, conditions).
  returned: when the object exists
  type: dict
nodes:
  description: Per-node status and package states, read from the Nodes.
  returned: when O(wait=true)
  type: dict
recent_failures:
  description: The controller's last failures (node, package, version, stage, task, message).
  returned: always
  type: list
  elements: dict
duration:
  description: Seconds spent waiting.
  returned: when O(wait=true)
  type: float
diff:
  description: Spec before and after, with --diff.
  returned: when changed and diff mode is on
  type: dict
"""

import time

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.nodewright.bridge.plugins.module_utils import client as nwclient
from ansible_collections.nodewright.bridge.plugins.module_utils import rollout as logic


def argspec():
    spec = dict(
        name=dict(type="str", required=True),
        state=dict(type="str", default="present", choices=["present", "absent", "paused", "resumed"]),
        packages=dict(type="dict"),
        node_selector=dict(type="dict"),
        node_selectors=dict(type="dict"),
        deployment_policy=dict(type="str"),
        interruption_budget=dict(type="dict"),
        pod_non_interrupt_labels=dict(type="dict"),
        additional_tolerations=dict(type="list", elements="dict"),
        priority=dict(type="int"),
        sequencing=dict(type="str", choices=["node", "all"]),
        runtime_required=dict(type="bool"),
        auto_taint_new_nodes=dict(type="bool"),
        drain=dict(type="dict"),
        host_connection=dict(type="str", choices=["chroot", "nsenter"]),
    )
    spec.update(nwclient.AUTH_ARG_SPEC)
    spec.update(nwclient.WAIT_ARG_SPEC)
    return spec


def wait_for(resources, name, timeout, sleep):
    start = time.monotonic()
    while True:
        obj = resources.get(nwclient.NODEWRIGHTS, name)
        if obj is None:
            raise nwclient.BridgeModuleError("NodeWright %s disappeared while waiting" % name)
        finished, failed, message = logic.rollout_outcome(obj)
        elapsed = time.monotonic() - start
        if finished:
            return obj, failed, message, elapsed
        if elapsed >= timeout:
            raise nwclient.BridgeModuleError(
                "timed out after %ds waiting for NodeWright %s: %s" % (timeout, name, message),
                details={"rollout": logic.summary(obj)},
            )
        time.sleep(sleep)


def run(module):
    params = module.params
    resources = nwclient.Resources(nwclient.api_client(params))
    name, state = params["name"], params["state"]
    existing = resources.get(nwclient.NODEWRIGHTS, name)
    result = dict(changed=False, recent_failures=[])

    if state == "absent":
        if existing is not None:
            resources.delete(nwclient.NODEWRIGHTS, name, dry_run=module.check_mode)
            result["changed"] = True
        return result

    if state in ("paused", "resumed"):
        if existing is None:
            raise nwclient.BridgeModuleError("NodeWright %s does not exist; cannot %s it" % (name, state[:-1]))
        want_paused = state == "paused"
        if logic.is_paused(existing) != want_paused:
            result["changed"] = True
            if not module.check_mode:
                existing = resources.apply(
                    nwclient.NODEWRIGHTS, logic.pause_patch(name, want_paused), existing
                )
        result["rollout"] = logic.summary(existing)
        return result

    if params.get("packages") is None and existing is None:
        raise nwclient.BridgeModuleError("packages is required to create NodeWright %s" % name)
    body = logic.rollout_body(params)
    obj = existing
    if logic.spec_changed(existing, body):
        result["changed"] = True
        # In check mode the API server still validates (dry run) so bad input fails the task.
        applied = resources.apply(nwclient.NODEWRIGHTS, body, existing, dry_run=module.check_mode)
        if module._diff:
            result["diff"] = dict(
                before=(existing or {}).get("spec", {}), after=applied.get("spec", {})
            )
        if not module.check_mode:
            obj = applied
    if obj is not None:
        result["rollout"] = logic.summary(obj)
        result["recent_failures"] = result["rollout"]["recent_failures"]

    if params["wait"] and not module.check_mode:
        obj, failed, message, elapsed = wait_for(resources, name, params["wait_timeout"], params["wait_sleep"])
        result["duration"] = round(elapsed, 1)
        result["rollout"] = logic.summary(obj)
        result["recent_failures"] = result["rollout"]["recent_failures"]
        result["nodes"] = logic.node_results(resources.nodes(), name)
        if failed:
            details = logic.erroring_details(result["nodes"])
            if details:
                message = "%s; erroring on the nodes: %s" % (message, "; ".join(details))
            raise nwclient.BridgeModuleError("rollout %s failed: %s" % (name, message), details=result)
    return result


def main():
    module = AnsibleModule(
        argument_spec=argspec(),
        supports_check_mode=True,
        mutually_exclusive=[("deployment_policy", "interruption_budget"), ("node_selector", "node_selectors")],
    )
    if not nwclient.HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=str(nwclient.KUBERNETES_IMPORT_ERROR))
    try:
        result = run(module)
    except nwclient.BridgeModuleError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
