"""Keep the last lines of every failed attempt in a per-node ConfigMap (``nwb-logs-<node>``).

Why: the failed pod is kept for a while (``--failed-pod-ttl``), but ``nwb logs`` must still show
which task failed and what it printed after the pod is gone (or where the kubelet serves no logs).
The stage planner reports each failure once (``stages.NodeFailure``, with the lines the agent's
result carried); this writes it, bounded by ``lifecycle.failure_tails``. The ConfigMap lives in the
controller's namespace and is owned by the Node, so it goes with the Node. A write that fails is
logged and dropped: the tail is for people, never a decision.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from lifecycle import failure_tails, stages
from nodewright_bridge.controller import podspec
from nodewright_bridge.errors import ApiError, ConflictError, NotFoundError
from nodewright_bridge.k8s import resources
from nodewright_bridge.k8s.rest import Rest

logger = logging.getLogger(__name__)

PREFIX = "nwb-logs-"
LABEL_LOGS = "bridge.nodewright.io/failure-logs"
MAX_NAME = 253
WRITE_TRIES = 3


def config_map_name(node: str) -> str:
    """``nwb-logs-<node>`` (hashed when too long for a name)."""
    name = f"{PREFIX}{node}"
    return name if len(name) <= MAX_NAME else podspec.safe_name(PREFIX, node, limit=MAX_NAME)


def tail_of(cr: str, failure: stages.NodeFailure) -> failure_tails.FailureTail:
    return failure_tails.FailureTail(
        cr=cr,
        package=failure.package,
        version=failure.version,
        stage=failure.stage,
        attempt=failure.attempt,
        task=failure.task,
        message=failure.message,
        time=stages.rfc3339(failure.time),
        pod=failure.pod,
        lines=list(failure.output),
    )


class FailureLogs:
    """Writes failure tails to the nodes' ConfigMaps (see the module docstring)."""

    def __init__(self, rest: Rest, namespace: str) -> None:
        self._rest = rest
        self._namespace = namespace

    def keep(
        self, cr: str, failures: Iterable[stages.NodeFailure], uids: Mapping[str, str]
    ) -> None:
        """Record ``failures`` of CR ``cr`` (``uids``: node name -> uid, for the owner)."""
        for failure in failures:
            tail = tail_of(cr, failure)
            try:
                self._write(failure.node, uids.get(failure.node, ""), tail)
            except ApiError as exc:
                logger.warning(
                    "cannot keep the failure's log tail",
                    extra={"cr": cr, "node": failure.node, "error": str(exc)},
                )

    def _write(self, node: str, uid: str, tail: failure_tails.FailureTail) -> None:
        name = config_map_name(node)
        for _ in range(WRITE_TRIES):
            try:
                current = self._rest.get(resources.CONFIG_MAPS, name, namespace=self._namespace)
            except NotFoundError:
                body = self._new(name, node, uid, failure_tails.merged({}, tail))
                try:
                    self._rest.create(resources.CONFIG_MAPS, body, namespace=self._namespace)
                    return
                except ApiError:
                    continue  # created meanwhile: merge into it
            data = failure_tails.merged(current.get("data") or {}, tail)
            try:
                self._rest.replace(
                    resources.CONFIG_MAPS,
                    name,
                    {**current, "data": data},
                    namespace=self._namespace,
                )
                return
            except ConflictError:
                continue
        logger.warning("gave up keeping a failure's log tail", extra={"node": node})

    @staticmethod
    def _new(name: str, node: str, uid: str, data: dict[str, str]) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "name": name,
            "labels": {**podspec.MANAGED_BY, LABEL_LOGS: "true"},
        }
        if uid:
            meta["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}
            ]
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
