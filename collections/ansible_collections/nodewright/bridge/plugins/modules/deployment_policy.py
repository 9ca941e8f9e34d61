#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: nodewright-bridge contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: deployment_policy
short_description: Create, update or delete a DeploymentPolicy (compartments and canary batches)
version_added: 0.1.0
description:
  - Manages a cluster-scoped C(DeploymentPolicy) that splits nodes into compartments, each with a
    budget (the most nodes in progress at once) and a fixed, linear or exponential batch strategy
    with success and failure thresholds.
  - In check mode the object is validated by the API server as a dry run.
author:
  - nodewright-bridge maintainers (@nodewright)
extends_documentation_fragment:
  - nodewright.bridge.connection
options:
  name:
    description: Name of the policy.
    type: str
    required: true
  state:
    description: Whether the policy should exist.
    type: str
    choices: [present, absent]
    default: present
  default:
    description:
      - Budget and strategy for nodes that match no compartment, with keys C(budget) (C(percent) or
        C(count)) and C(strategy) (one of C(fixed), C(linear), C(exponential) with C(initial_batch),
        C(batch_threshold), C(failure_threshold), C(safety_limit), C(delta), C(growth_factor)).
    type: dict
  compartments:
    description:
      - Compartments, each with C(name), C(selector), C(budget) and optionally C(strategy).
    type: list
    elements: dict
  reset_batch_state_on_completion:
    description: Reset batch state when a rollout using this policy completes.
    type: bool
"""

EXAMPLES = r"""
- name: Canary policy for two GPU generations
  nodewright.bridge.deployment_policy:
    name: canary
    default:
      budget: {percent: 10}
      strategy: {fixed: {initial_batch: 1}}
    compartments:
      - name: a100
        selector: {match_labels: {nvidia.com/gpu.product: A100}}
        budget: {count: 4}
        strategy: {exponential: {initial_batch: 1, growth_factor: 2, failure_threshold: 1}}
"""

RETURN = r"""
policy:
  description: The policy as stored by the API server.
  returned: when state is present
  type: dict
diff:
  description: Spec before and after, with --diff.
  returned: when changed and diff mode is on
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.nodewright.bridge.plugins.module_utils import client as nwclient
from ansible_collections.nodewright.bridge.plugins.module_utils import rollout as logic


def argspec():
    spec = dict(
        name=dict(type="str", required=True),
        state=dict(type="str", default="present", choices=["present", "absent"]),
        default=dict(type="dict"),
        compartments=dict(type="list", elements="dict"),
        reset_batch_state_on_completion=dict(type="bool"),
    )
    spec.update(nwclient.AUTH_ARG_SPEC)
    return spec


def run(module):
    params = module.params
    resources = nwclient.Resources(nwclient.api_client(params))
    existing = resources.get(nwclient.POLICIES, params["name"])
    result = dict(changed=False)
    if params["state"] == "absent":
        if existing is not None:
            resources.delete(nwclient.POLICIES, params["name"], dry_run=module.check_mode)
            result["changed"] = True
        return result
    body = logic.policy_body(params)
    policy = existing
    if logic.spec_changed(existing, body):
        result["changed"] = True
        applied = resources.apply(nwclient.POLICIES, body, existing, dry_run=module.check_mode)
        if module._diff:
            result["diff"] = dict(before=(existing or {}).get("spec", {}), after=applied.get("spec", {}))
        if not module.check_mode:
            policy = applied
    result["policy"] = policy or {}
    return result


def main():
    module = AnsibleModule(
        argument_spec=argspec(),
        supports_check_mode=True,
        required_if=[("state", "present", ("default",))],
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
