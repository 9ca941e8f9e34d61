"""Cut cached objects down to the fields the controller reads.

Why: at 5,000 nodes the informer caches are the controller's memory. A Node object as served is
10-30 KiB, mostly ``status.images`` and ``metadata.managedFields``; a Pod is 5-15 KiB, mostly
``managedFields``, container specs and env. The controller reads a small, known subset:

- everything: name, namespace, uid, resourceVersion, generation, labels, annotations (minus
  ``kubectl.kubernetes.io/last-applied-configuration``), ownerReferences, finalizers,
  creation/deletion timestamps; never ``managedFields``;
- Node: ``spec.unschedulable``, ``spec.taints``; ``status.conditions``, ``status.nodeInfo.bootID``;
- Pod: ``spec.nodeName``, ``restartPolicy``, ``priority``, volume names and types (drain must see
  emptyDir), container names and images; ``status.phase``, ``reason``, ``message``,
  ``conditions``, ``startTime`` and per-container state (termination message, exit code);
- PodDisruptionBudget, NodeWright, DeploymentPolicy: all of spec and status (they are small).
- Secret (controller namespace only): a digest per key instead of the data - the controller
  needs to notice that a package's secret vars changed, never to read them.

A field missing here is a bug in this module, not a reason to cache whole objects.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

JsonObject = dict[str, Any]
Slimmer = Callable[[JsonObject], JsonObject]

_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_META_KEEP = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "labels",
    "ownerReferences",
    "finalizers",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)


def slim_metadata(meta: JsonObject) -> JsonObject:
    out = {k: meta[k] for k in _META_KEEP if k in meta}
    annotations = meta.get("annotations")
    if annotations:
        kept = {k: v for k, v in annotations.items() if k != _LAST_APPLIED}
        if kept:
            out["annotations"] = kept
    return out


def _base(obj: JsonObject) -> JsonObject:
    out: JsonObject = {}
    for key in ("apiVersion", "kind"):
        if key in obj:
            out[key] = obj[key]
    out["metadata"] = slim_metadata(obj.get("metadata") or {})
    return out


def _pick(source: JsonObject | None, keys: tuple[str, ...]) -> JsonObject:
    if not source:
        return {}
    return {k: source[k] for k in keys if k in source}


SECRET_DIGEST_CHARS = 16  # 64 bits: enough to notice a change; no value is kept or exposed


def slim_secret(obj: JsonObject) -> JsonObject:
    """Metadata plus ``digests``: key -> sha256 of the (base64) value; the data is dropped."""
    out = _base(obj)
    data = {**(obj.get("stringData") or {}), **(obj.get("data") or {})}
    out["digests"] = {
        key: hashlib.sha256(str(value).encode()).hexdigest()[:SECRET_DIGEST_CHARS]
        for key, value in sorted(data.items())
    }
    return out


def slim_node(obj: JsonObject) -> JsonObject:
    out = _base(obj)
    out["spec"] = _pick(obj.get("spec"), ("unschedulable", "taints"))
    status = obj.get("status") or {}
    slim_status: JsonObject = {}
    conditions = status.get("conditions")
    if conditions:
        slim_status["conditions"] = [
            _pick(c, ("type", "status", "reason", "message", "lastTransitionTime"))
            for c in conditions
        ]
    boot_id = (status.get("nodeInfo") or {}).get("bootID")
    if boot_id:
        slim_status["nodeInfo"] = {"bootID": boot_id}
    out["status"] = slim_status
    return out


def _slim_container_status(status: JsonObject) -> JsonObject:
    out = _pick(status, ("name", "ready", "restartCount", "started"))
    for key in ("state", "lastState"):
        state = status.get(key)
        if state:
            out[key] = state  # {running|waiting|terminated: {...}}: small, and holds the message
    return out


def slim_pod(obj: JsonObject) -> JsonObject:
    out = _base(obj)
    spec = obj.get("spec") or {}
    slim_spec = _pick(spec, ("nodeName", "restartPolicy", "priority", "priorityClassName"))
    volumes = spec.get("volumes")
    if volumes:
        # keep the volume *type* (emptyDir, hostPath, ...) but not its (possibly large) settings
        slim_spec["volumes"] = [
            {"name": v.get("name"), **{k: {} for k in v if k != "name"}} for v in volumes
        ]
    containers = spec.get("containers")
    if containers:
        slim_spec["containers"] = [_pick(c, ("name", "image")) for c in containers]
    out["spec"] = slim_spec
    status = obj.get("status") or {}
    slim_status = _pick(status, ("phase", "reason", "message", "startTime"))
    if status.get("conditions"):
        slim_status["conditions"] = [
            _pick(c, ("type", "status", "reason", "lastTransitionTime"))
            for c in status["conditions"]
        ]
    for key in ("containerStatuses", "initContainerStatuses"):
        if status.get(key):
            slim_status[key] = [_slim_container_status(s) for s in status[key]]
    out["status"] = slim_status
    return out


def slim_generic(obj: JsonObject) -> JsonObject:
    """Drop only ``managedFields`` and the last-applied annotation (small objects: PDBs, CRs)."""
    out = dict(obj)
    out["metadata"] = slim_metadata(obj.get("metadata") or {})
    return out
