#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: nodewright-bridge contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: rollout_info
short_description: Read the status of NodeWright rollouts, per compartment and per node
version_added: 0.1.0
description:
  - Returns the status of one NodeWright rollout, or of all of them. That is the aggregate status,
    conditions, compartments with their batch state, recent failures, and the per-node status and
    package states read from the Nodes, where the controller keeps the per-node truth.
author:
  - nodewright-bridge maintainers (@nodewright)
extends_documentation_fragment:
  - nodewright.bridge.connection
options:
  name:
    description: Name of one NodeWright; all rollouts when omitted.
    type: str
  include_nodes:
    description: Also read the per-node states from the Nodes.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Where is the GPU tuning rollout?
  nodewright.bridge.rollout_info:
    name: gpu-tuning
  register: info

- name: Show failed nodes
  ansible.builtin.debug:
    msg: "{{ info.rollouts[0].recent_failures }}"
"""

RETURN = r"""
rollouts:
  description: One entry per rollout with status, completeness, compartments, conditions and nodes.
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.nodewright.bridge.plugins.module_utils import client as nwclient
from ansible_collections.nodewright.bridge.plugins.module_utils import rollout as logic


def argspec():
    spec = dict(name=dict(type="str"), include_nodes=dict(type="bool", default=True))
    spec.update(nwclient.AUTH_ARG_SPEC)
    return spec


def run(module):
    resources = nwclient.Resources(nwclient.api_client(module.params))
    name = module.params["name"]
    if name:
        obj = resources.get(nwclient.NODEWRIGHTS, name)
        objects = [obj] if obj is not None else []
    else:
        objects = resources.list(nwclient.NODEWRIGHTS)
    nodes = resources.nodes() if module.params["include_nodes"] and objects else []
    rollouts = []
    for obj in objects:
        entry = logic.summary(obj)
        if module.params["include_nodes"]:
            entry["nodes"] = logic.node_results(nodes, entry["name"])
        rollouts.append(entry)
    return dict(changed=False, rollouts=rollouts)


def main():
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    if not nwclient.HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=str(nwclient.KUBERNETES_IMPORT_ERROR))
    try:
        result = run(module)
    except nwclient.BridgeModuleError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
