# -*- coding: utf-8 -*-
# Copyright: nodewright-bridge contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure logic of the modules: build CR bodies from module arguments and read rollout status.

Kept free of I/O so it is unit-tested without a cluster; the modules only glue it to the API.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

PREFIX = "bridge.nodewright.io/"
PAUSE_ANNOTATION = PREFIX + "pause"
API_VERSION = "bridge.nodewright.io/v1alpha1"

# module option (snake_case) -> CR field (camelCase); also applied inside package dicts
_CAMEL_EXCEPTIONS = {}


def camel(name):
    """snake_case -> camelCase; already-camel names pass through unchanged."""
    if name in _CAMEL_EXCEPTIONS:
        return _CAMEL_EXCEPTIONS[name]
    parts = name.split("_")
    return parts[0] + "".join(part[:1].upper() + part[1:] for part in parts[1:])


# Keys whose values are user data (label keys, var names, file names): never renamed.
_OPAQUE = ("vars", "configMap", "matchLabels", "dependsOn", "configInterrupts", "packages")


def camelize(value, parent=None):
    """Rename dict keys to camelCase recursively, leaving user-data maps (vars, labels) alone."""
    if isinstance(value, dict):
        if parent in _OPAQUE:
            if parent == "packages" or parent == "configInterrupts":
                return dict((k, camelize(v)) for k, v in value.items())
            return dict(value)
        out = {}
        for key, item in value.items():
            new_key = camel(key)
            out[new_key] = camelize(item, new_key)
        return out
    if isinstance(value, list):
        return [camelize(item) for item in value]
    return value


ROLLOUT_FIELDS = (
    "node_selectors",
    "packages",
    "deployment_policy",
    "interruption_budget",
    "pod_non_interrupt_labels",
    "additional_tolerations",
    "priority",
    "sequencing",
    "runtime_required",
    "auto_taint_new_nodes",
    "drain",
    "host_connection",
)


def rollout_body(params):
    """The NodeWright object the module wants, from its arguments."""
    spec = {}
    for field in ROLLOUT_FIELDS:
        value = params.get(field)
        if value is None:
            continue
        spec[camel(field)] = camelize(value, camel(field))
    if params.get("node_selector") is not None and "nodeSelectors" not in spec:
        spec["nodeSelectors"] = {"matchLabels": dict(params["node_selector"])}
    return {
        "apiVersion": API_VERSION,
        "kind": "NodeWright",
        "metadata": {"name": params["name"]},
        "spec": spec,
    }


def policy_body(params):
    """The DeploymentPolicy object the module wants, from its arguments."""
    spec = {"default": camelize(params["default"])}
    if params.get("compartments") is not None:
        spec["compartments"] = camelize(params["compartments"])
    if params.get("reset_batch_state_on_completion") is not None:
        spec["resetBatchStateOnCompletion"] = params["reset_batch_state_on_completion"]
    return {
        "apiVersion": API_VERSION,
        "kind": "DeploymentPolicy",
        "metadata": {"name": params["name"]},
        "spec": spec,
    }


def spec_changed(existing, desired):
    """True when applying ``desired`` would change the live object's spec.

    Compares only the fields the module sets: defaults the API server filled in are not a change.
    """
    if existing is None:
        return True
    return not _subset(desired.get("spec", {}), existing.get("spec", {}))


def _subset(want, have):
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return False
        return all(_subset(v, have.get(k)) for k, v in want.items())
    if isinstance(want, list):
        if not isinstance(have, list) or len(want) != len(have):
            return False
        return all(_subset(w, h) for w, h in zip(want, have))
    return want == have


def pause_patch(name, paused):
    """Merge patch that pauses (or resumes) a rollout through its annotation."""
    return {"metadata": {"name": name, "annotations": {PAUSE_ANNOTATION: "true" if paused else None}}}


def is_paused(obj):
    annotations = (obj or {}).get("metadata", {}).get("annotations") or {}
    return annotations.get(PAUSE_ANNOTATION) == "true"


def _condition(status, kind):
    for cond in status.get("conditions") or []:
        if cond.get("type") == kind:
            return cond
    return None


# Conditions that end a wait with a failure, most specific first: Degraded names the node,
# package, stage, task and error; Stalled only says which compartment stopped.
_FAILURE_CONDITIONS = ("InvalidSpec", "PolicyNotFound", "Degraded", "Stalled")


def rollout_outcome(obj):
    """(finished, failed, message) for a NodeWright object as the controller reports it.

    Only status the controller wrote for the current generation counts: after an update, an old
    Ready or Degraded says nothing about the new spec. Finished when Ready=True; failed when the
    spec is invalid, the policy is missing, validation failed (Degraded) or a compartment stopped
    (Stalled) - the message joins the controller's messages of every such condition, Degraded's
    first, so it names the node, package, stage, task and the failure text.
    """
    status = obj.get("status") or {}
    generation = obj.get("metadata", {}).get("generation")
    observed = status.get("observedGeneration")
    if generation is not None and (observed is None or observed < generation):
        return False, False, "waiting for the controller to observe generation %s" % generation
    failures = []
    for kind in _FAILURE_CONDITIONS:
        cond = _condition(status, kind)
        if cond and cond.get("status") == "True":
            failures.append("%s: %s" % (kind, cond.get("message") or cond.get("reason") or kind))
    if failures:
        return True, True, "; ".join(failures)
    ready = _condition(status, "Ready")
    if ready and ready.get("status") == "True":
        return True, False, ready.get("message", "")
    if ready:
        return False, False, ready.get("message", "")
    return False, False, "waiting for the controller to report status"


def node_results(nodes, cr_name):
    """Per-node status and package states for one CR, read from the Nodes (the source of truth)."""
    state_key = PREFIX + "state-" + cr_name
    status_key = PREFIX + "status-" + cr_name
    results = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        labels = meta.get("labels") or {}
        if state_key not in annotations and status_key not in labels:
            continue
        try:
            packages = json.loads(annotations.get(state_key) or "{}")
        except ValueError:
            packages = {"error": "unparseable state annotation"}
        results[meta.get("name")] = {
            "status": annotations.get(status_key) or labels.get(status_key, "unknown"),
            "packages": packages,
        }
    return results


def erroring_details(node_states, limit=5):
    """One line per erroring package on a node, from the node results (the Nodes' own record).

    The controller's conditions summarise; the Nodes keep each package's stage and last message,
    so a failed wait can say what failed even when the CR status names no task yet.
    """
    lines = []
    for node in sorted(node_states):
        packages = node_states[node].get("packages") or {}
        for key in sorted(packages):
            entry = packages[key]
            if not isinstance(entry, dict) or entry.get("state") != "erroring":
                continue
            package, version = (key.split("|", 1) + [""])[:2]
            lines.append(
                "node %s, package %s %s, stage %s: %s"
                % (node, package, version, entry.get("stage", "?"), entry.get("message", "no message"))
            )
    if len(lines) > limit:
        lines = lines[:limit] + ["... and %d more" % (len(lines) - limit)]
    return lines


def summary(obj):
    """The part of a NodeWright a playbook usually wants to read or register."""
    status = obj.get("status") or {}
    return {
        "name": obj.get("metadata", {}).get("name"),
        "status": status.get("status", "unknown"),
        "complete_nodes": status.get("completeNodes", ""),
        "nodes_in_progress": status.get("nodesInProgress", 0),
        "compartments": status.get("compartments") or {},
        "conditions": status.get("conditions") or [],
        "recent_failures": status.get("recentFailures") or [],
        "paused": is_paused(obj),
    }
