"""Build the node pods, the validation pods and their ConfigMaps (docs/node-pod-contract.md).

A node pod is bound to its node with ``spec.nodeName`` (the scheduler never sees it), runs once
(``restartPolicy: Never``; the controller owns retries and their back-off), is privileged with the
host's ``/`` at ``/host``, and gets its inputs as files: vars as a ConfigMap (never on the command
line or in env, where they would show in ``ps`` and pod specs), secrets as Secret volumes.

A check pod (``lifecycle.preflight``: preflight and drift checks) is a node pod whose first
stage is ``preflight`` or ``drift``: it runs the stages after it with ``nwb-agent run --check``,
which changes nothing on the host.

A validation pod (``lifecycle.validating``) gets the same vars and secret mounts but nothing of
the host: not privileged, no host mount, no host PID; it only reads the package in its image.

Names are deterministic so that a restarted controller finds the pod it created before instead of
creating a second one; the hash suffix keeps them unique after truncation to 63 characters.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lifecycle import durations, stages, validating
from lifecycle.nodestate import RUNTIME_REQUIRED_TAINT_KEY
from lifecycle.spec import NodeWright, Package, Toleration

NAMESPACE = "nodewright-system"
MANAGED_BY = {"app.kubernetes.io/managed-by": "nodewright-bridge"}
LABEL_CR = "bridge.nodewright.io/cr"
LABEL_PACKAGE = "bridge.nodewright.io/package"
LABEL_VERSION = "bridge.nodewright.io/version"
LABEL_STAGE = "bridge.nodewright.io/stage"
LABEL_NODE = "bridge.nodewright.io/node"
ANNOTATION_RESOURCE_ID = "bridge.nodewright.io/resource-id"
ANNOTATION_STAGES = "bridge.nodewright.io/stages"
ANNOTATION_ATTEMPT = "bridge.nodewright.io/attempt"
LABEL_VALIDATE = validating.VALIDATION_LABEL
ANNOTATION_VALIDATION_KEY = "bridge.nodewright.io/validation-key"
ANNOTATION_STARTED = "bridge.nodewright.io/started"
VARS_MOUNT = "/etc/nodewright/vars"
CONFIG_MOUNT = "/etc/nodewright/config"
SECRETS_MOUNT = "/etc/nodewright/secrets"
HOST_MOUNT = "/host"
MAX_NAME = 63
_UNSAFE = re.compile(r"[^a-z0-9-]+")


def safe_name(*parts: str, limit: int = MAX_NAME) -> str:
    """A DNS-1123 label built from ``parts``: lower-cased, dots to dashes, hashed when long."""
    joined = "-".join(p for p in parts if p)
    digest = hashlib.sha256(joined.encode()).hexdigest()[:8]
    cleaned = _UNSAFE.sub("-", joined.lower()).strip("-")
    head = cleaned[: limit - len(digest) - 1].rstrip("-")
    return f"{head}-{digest}"


def image_reference(package: Package) -> str:
    """``image@digest`` when pinned, else ``image:version``."""
    return validating.image_reference(package)


def vars_configmap_name(cr: str, package: str, version: str, vars_hash: str) -> str:
    return safe_name(cr, package, version, "vars", vars_hash[:10])


def vars_hash(package: Package) -> str:
    """Stable hash of what the vars ConfigMap holds; a change means a new ConfigMap.

    The hash the stage planner records per node (``lifecycle.stages.config_hash``) without the
    secretVars data digest (the ConfigMap holds no secrets), so the ConfigMap a pod mounts is
    named after exactly the vars and files the node state says it applied.
    """
    return stages.config_hash(package)


def build_vars_configmap(cr: NodeWright, package: Package) -> dict[str, Any]:
    """The ConfigMap holding ``vars.json`` and the package's configMap files."""
    cr_name = cr.metadata.name
    data = {"vars.json": json.dumps(package.vars, sort_keys=True)}
    binary_safe = {f"config.{k}": v for k, v in package.config_map.items()}
    data.update(binary_safe)
    pkg_name = _package_name(cr, package)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": vars_configmap_name(cr_name, pkg_name, package.version, vars_hash(package)),
            "namespace": NAMESPACE,
            "labels": {**MANAGED_BY, LABEL_CR: cr_name, LABEL_PACKAGE: pkg_name},
            "ownerReferences": [_owner(cr)],
        },
        "data": data,
    }


@dataclass(frozen=True, slots=True)
class PodRequest:
    """Everything needed to build one node pod."""

    cr: NodeWright
    package_name: str
    node: str
    stages: Sequence[str]  # e.g. ("apply", "apply-check", "config", "config-check")
    resource_id: str
    node_order: int
    previous_version: str = ""
    interrupt_type: str | None = None  # set for interrupt pods
    interrupt_services: Sequence[str] = ()
    attempt: int = 1
    annotations: Mapping[str, str] = field(default_factory=dict)  # e.g. a carried start


def pod_name(req: PodRequest) -> str:
    first = req.stages[0] if req.stages else ("interrupt" if req.interrupt_type else "run")
    version = req.cr.spec.packages[req.package_name].version
    return safe_name(
        "nw", req.cr.metadata.name, req.package_name, version, first, req.node, f"a{req.attempt}"
    )


def build_pod(req: PodRequest) -> dict[str, Any]:
    """The pod manifest for a package pod or an interrupt pod."""
    cr = req.cr
    package = cr.spec.packages[req.package_name]
    cr_name = cr.metadata.name
    first_stage = req.stages[0] if req.stages else ("interrupt" if req.interrupt_type else "")
    if req.interrupt_type:
        args = ["interrupt", "--type", req.interrupt_type]
        if req.interrupt_services:
            args += ["--services", ",".join(req.interrupt_services)]
    elif first_stage in stages.CHECK_STAGES:  # check mode: the stages after the first
        args = ["run", "--check", "--stages", ",".join(req.stages[1:])]
    else:
        args = ["run", "--stages", ",".join(req.stages)]
    volumes, mounts = _volumes(req, package)
    container: dict[str, Any] = {
        "name": "agent",
        "image": image_reference(package),
        "imagePullPolicy": "IfNotPresent",
        "command": ["nwb-agent"],
        "args": args,
        "env": _env(req, package),
        "volumeMounts": mounts,
        "securityContext": {"privileged": True},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    resources = _resources(package)
    if resources:
        container["resources"] = resources
    spec: dict[str, Any] = {
        "nodeName": req.node,
        "restartPolicy": "Never",
        "hostPID": True,
        "containers": [container],
        "volumes": volumes,
        "tolerations": _tolerations(cr.spec.additional_tolerations),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
    }
    if package.graceful_shutdown:
        spec["terminationGracePeriodSeconds"] = int(
            durations.parse_duration(package.graceful_shutdown).total_seconds()
        )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(req),
            "namespace": NAMESPACE,
            "labels": {
                **MANAGED_BY,
                LABEL_CR: cr_name,
                LABEL_PACKAGE: req.package_name,
                LABEL_VERSION: package.version,
                LABEL_STAGE: first_stage,
                LABEL_NODE: safe_name(req.node),
            },
            "annotations": {
                ANNOTATION_RESOURCE_ID: req.resource_id,
                ANNOTATION_STAGES: ",".join(req.stages) if req.stages else "interrupt",
                ANNOTATION_ATTEMPT: str(req.attempt),
                **req.annotations,
            },
            "ownerReferences": [_owner(cr)],
        },
        "spec": spec,
    }


def validation_pod_name(cr: NodeWright, start: validating.PodToStart) -> str:
    version = cr.spec.packages[start.package].version
    return safe_name(
        "nwv", cr.metadata.name, start.package, version, start.key[:10], f"a{start.attempt}"
    )


def build_validation_pod(cr: NodeWright, start: validating.PodToStart) -> dict[str, Any]:
    """The validation pod of one package spec: ``nwb-agent validate`` in the package image on
    ``start.node`` (so the image is pulled there), with the vars and secrets of a node pod and
    nothing of the host."""
    package = cr.spec.packages[start.package]
    volumes, mounts = _input_volumes(cr.metadata.name, start.package, package)
    env = [
        {"name": "NW_CR", "value": cr.metadata.name},
        {"name": "NW_PACKAGE", "value": start.package},
        {"name": "NW_VERSION", "value": package.version},
        {"name": "NW_NODE", "value": start.node},
    ]
    container: dict[str, Any] = {
        "name": "agent",
        "image": image_reference(package),
        "imagePullPolicy": "IfNotPresent",
        "command": ["nwb-agent"],
        "args": ["validate"],
        "env": env,
        "volumeMounts": mounts,
        "securityContext": {
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    deadline = max(int((start.deadline - start.started).total_seconds()), 1)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": validation_pod_name(cr, start),
            "namespace": NAMESPACE,
            "labels": {
                **MANAGED_BY,
                LABEL_CR: cr.metadata.name,
                LABEL_VALIDATE: start.package,
                LABEL_NODE: safe_name(start.node),
            },
            "annotations": {
                ANNOTATION_VALIDATION_KEY: start.key,
                ANNOTATION_ATTEMPT: str(start.attempt),
                ANNOTATION_STARTED: stages.rfc3339(start.started),
            },
            "ownerReferences": [_owner(cr)],
        },
        "spec": {
            "nodeName": start.node,
            "restartPolicy": "Never",
            "containers": [container],
            "volumes": volumes,
            "tolerations": _tolerations(cr.spec.additional_tolerations),
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "activeDeadlineSeconds": deadline,
        },
    }


def _env(req: PodRequest, package: Package) -> list[dict[str, Any]]:
    """The node pod contract's env (docs/node-pod-contract.md), then the package's own."""
    cr = req.cr
    env: list[dict[str, Any]] = [
        {"name": "NW_CR", "value": cr.metadata.name},
        {"name": "NW_PACKAGE", "value": req.package_name},
        {"name": "NW_VERSION", "value": package.version},
        {"name": "NW_PREVIOUS_VERSION", "value": req.previous_version},
        {"name": "NW_NODE", "value": req.node},
        {"name": "NW_NODE_ORDER", "value": str(req.node_order)},
        {"name": "NW_RESOURCE_ID", "value": req.resource_id},
        {"name": "NW_HOST_ROOT", "value": HOST_MOUNT},
        {"name": "NW_HOST_CONNECTION", "value": cr.spec.host_connection.value},
    ]
    if package.interrupt is None and not req.interrupt_type:
        # The role decides: its restart handlers become requests the controller performs on a
        # drained node. A CR that sets the interrupt owns it, and handlers then act in place.
        env.append({"name": "NW_DEFER_RESTARTS", "value": "true"})
    if not req.interrupt_type:
        # Tag names are validated comma-free, so joining them loses nothing.
        for name, tags in (("NW_TAGS", package.tags), ("NW_SKIP_TAGS", package.skip_tags)):
            if tags:
                env.append({"name": name, "value": ",".join(tags)})
    return env + [e.to_wire() for e in package.env]


def _volumes(
    req: PodRequest, package: Package
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The host root, the vars (and configMap files) and each secretVars Secret, mounted."""
    volumes, mounts = _input_volumes(req.cr.metadata.name, req.package_name, package)
    host = {"name": "host", "hostPath": {"path": "/", "type": "Directory"}}
    host_mount = {"name": "host", "mountPath": HOST_MOUNT, "mountPropagation": "HostToContainer"}
    return [host, *volumes], [host_mount, *mounts]


def _input_volumes(
    cr_name: str, package_name: str, package: Package
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The vars (and configMap files) and each secretVars Secret: a package's inputs."""
    config_map = vars_configmap_name(cr_name, package_name, package.version, vars_hash(package))
    volumes: list[dict[str, Any]] = [
        {
            "name": "vars",
            "configMap": {
                "name": config_map,
                "items": [{"key": "vars.json", "path": "vars.json"}],
            },
        },
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "vars", "mountPath": VARS_MOUNT, "readOnly": True},
    ]
    if package.config_map:
        items = [{"key": f"config.{k}", "path": k} for k in sorted(package.config_map)]
        volumes.append({"name": "config", "configMap": {"name": config_map, "items": items}})
        mounts.append({"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True})
    for i, ref in enumerate(package.secret_vars):
        secret: dict[str, Any] = {"secretName": ref.secret_name}
        if ref.key:
            secret["items"] = [{"key": ref.key, "path": ref.key}]
        volumes.append({"name": f"secret-{i}", "secret": secret})
        mounts.append(
            {
                "name": f"secret-{i}",
                "mountPath": f"{SECRETS_MOUNT}/{ref.secret_name}",
                "readOnly": True,
            }
        )
    return volumes, mounts


def _package_name(cr: NodeWright, package: Package) -> str:
    for name, candidate in cr.spec.packages.items():
        if candidate is package:
            return name
    raise KeyError("package is not part of this NodeWright")


def _owner(cr: NodeWright) -> dict[str, Any]:
    return {
        "apiVersion": cr.api_version,
        "kind": cr.kind,
        "name": cr.metadata.name,
        "uid": cr.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": False,
    }


def _tolerations(extra: Sequence[Toleration]) -> list[dict[str, Any]]:
    # Node pods must run on cordoned nodes and on nodes carrying our runtime-required taint.
    base: list[dict[str, Any]] = [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"},
        {"key": RUNTIME_REQUIRED_TAINT_KEY, "operator": "Exists"},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
    ]
    return base + [t.to_wire() for t in extra]


def _resources(package: Package) -> dict[str, Mapping[str, str]]:
    r = package.resources
    if r is None or r.cpu_request is None:
        return {}
    return {
        "requests": {"cpu": r.cpu_request or "", "memory": r.memory_request or ""},
        "limits": {"cpu": r.cpu_limit or "", "memory": r.memory_limit or ""},
    }
