"""Validation pods on the controller side: read them from the cache, create and delete them.

Every decision is ``lifecycle.validating``'s (which spec needs a pod, what a pod's outcome means,
whether new work may start); this module only turns cached objects into its inputs and its
plan into API calls:

- :func:`observe_pods`: the CR's validation pods (label ``bridge.nodewright.io/validate``) from
  the package-pod cache as ``ValidationPod`` values - result from the termination message,
  waiting reason (``ErrImagePull``, ...), the start the controller stamped on the pod;
- :func:`missing_secrets`: the ``secretVars`` Secrets or keys the controller namespace lacks
  (read from the slimmed Secret cache: key names and digests, never values);
- :func:`start_pods` / :func:`delete_pods`: the plan's creates (after the package's vars
  ConfigMap exists) and deletes (sent after the status that records the outcome).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from lifecycle import validating
from lifecycle.spec import NodeWright
from lifecycle.stages import PodPhase
from nodewright_bridge.controller import podspec, snapshot
from nodewright_bridge.controller.executor import Executor
from nodewright_bridge.k8s import caches

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ValidationSettings:
    """Controller settings of the validation step (``nwb controller --image-pull-deadline``)."""

    pull_deadline: timedelta = validating.DEFAULT_PULL_DEADLINE


def decode_pod(pod: Mapping[str, Any]) -> validating.ValidationPod | None:
    """A validation pod as ``lifecycle.validating`` sees it (None for any other pod)."""
    meta = snapshot.meta_of(pod)
    labels = meta.get("labels") or {}
    package = labels.get(validating.VALIDATION_LABEL)
    if not package:
        return None
    annotations = meta.get("annotations") or {}
    attempt = snapshot.pod_attempt(annotations)
    status = pod.get("status") or {}
    phase = snapshot.pod_phase(pod)
    state = snapshot.agent_state(pod)
    waiting = state.get("waiting") or {}
    terminated = state.get("terminated") or {}
    result = None
    ended = ""
    if terminated:
        message = terminated.get("message") or ""
        if message:
            result = validating.parse_result(message)
        ended = f"exit code {terminated.get('exitCode')} ({terminated.get('reason') or 'Error'})"
    elif phase is PodPhase.FAILED:
        ended = f"{status.get('reason') or 'Failed'}: {status.get('message') or ''}".strip(": ")
    started = snapshot.parse_time(annotations.get(podspec.ANNOTATION_STARTED))
    return validating.ValidationPod(
        name=str(meta.get("name", "")),
        package=str(package),
        key=str(annotations.get(podspec.ANNOTATION_VALIDATION_KEY, "")),
        attempt=attempt,
        node=str((pod.get("spec") or {}).get("nodeName") or ""),
        phase=phase,
        started=started or snapshot.parse_time(meta.get("creationTimestamp")),
        waiting_reason=str(waiting.get("reason") or ""),
        waiting_message=str(waiting.get("message") or ""),
        result=result,
        ended=ended,
        deleting=bool(meta.get("deletionTimestamp")),
    )


def observe_pods(stores: snapshot.Stores, cr_name: str) -> list[validating.ValidationPod]:
    """The CR's validation pods in the cache."""
    out = []
    for raw in stores.package_pods.by_index(caches.BY_CR, cr_name):
        decoded = decode_pod(raw)
        if decoded is not None:
            out.append(decoded)
    return out


def missing_secrets(cr: NodeWright, secrets: Any, namespace: str) -> dict[str, list[str]]:
    """Package -> the ``secretVars`` Secrets (or keys of them) that do not exist: a pod that
    mounts them would never start, so validation says so at once."""
    out: dict[str, list[str]] = {}
    for name, pkg in cr.spec.packages.items():
        for i, ref in enumerate(pkg.secret_vars):
            obj = secrets.get(f"{namespace}/{ref.secret_name}")
            where = f"[{i}] Secret {namespace}/{ref.secret_name}"
            if obj is None:
                out.setdefault(name, []).append(where)
            elif ref.key and ref.key not in (obj.get("digests") or {}):
                out.setdefault(name, []).append(f"{where}: key {ref.key}")
    return out


def start_pods(executor: Executor, cr: NodeWright, plan: validating.ValidationPlan) -> None:
    """Create the plan's validation pods (create-if-absent: a name is one spec and attempt)."""
    for start in plan.start:
        if start.package not in cr.spec.packages:
            continue
        pod = podspec.build_validation_pod(cr, start)
        if executor.start_validation_pod(cr, start.package, pod):
            logger.info(
                "validation pod created",
                extra={"pod": pod["metadata"]["name"], "node": start.node, "cr": cr.metadata.name},
            )


def delete_pods(executor: Executor, names: Sequence[str]) -> None:
    for name in names:
        executor.delete_pod_soon(name)
