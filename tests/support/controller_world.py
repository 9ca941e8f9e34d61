"""The real reconciler and executor on an in-memory API (``nodewright_bridge.testing``), for unit
tests of the pass's steps: the caches are refilled from the API's objects on ``sync()``, pods
end when a test says so, and every request is recorded in order."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from prometheus_client import CollectorRegistry

from lifecycle.results import AgentResult
from lifecycle.validating import VALIDATION_LABEL, ValidationResult
from nodewright_bridge.controller import snapshot
from nodewright_bridge.controller.productmetrics import ProductMetrics
from nodewright_bridge.controller.reconciler import NodeWrightReconciler
from nodewright_bridge.k8s import caches, resources
from nodewright_bridge.k8s.events import EventRecorder
from nodewright_bridge.k8s.patching import Writer
from nodewright_bridge.runtime.reconciling import Result
from nodewright_bridge.testing import FakeClock, InMemoryApi

NAMESPACE = "nodewright-system"
GROUP_VERSION = "bridge.nodewright.io/v1alpha1"


def node(name: str, labels: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {}), **meta},
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"bootID": f"boot-{name}"},
        },
    }


def nodewright(name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "NodeWright",
        "metadata": {"name": name, "uid": f"uid-{name}", "generation": 1, **meta},
        "spec": spec,
    }


class ControllerWorld:
    def __init__(self) -> None:
        self.api = InMemoryApi()
        self.clock = FakeClock()
        self.stores = snapshot.stores_from()
        self.reconciler = self._reconciler()

    def _reconciler(self) -> NodeWrightReconciler:
        return NodeWrightReconciler(
            rest=self.api,
            writer=Writer(self.api),
            events=EventRecorder(self.api, clock=self.clock, instance="test"),
            stores=self.stores,
            namespace=NAMESPACE,
            metrics=ProductMetrics(CollectorRegistry()),
            clock=self.clock,
        )

    def restart(self) -> None:
        """A new controller process: it knows only what the API holds."""
        self.stores = snapshot.stores_from()
        self.reconciler = self._reconciler()

    # -- the cluster -------------------------------------------------------------------------

    def add(self, resource: resources.Resource, obj: dict[str, Any]) -> None:
        self.api.put(resource, obj)

    def obj(self, resource: resources.Resource, name: str, namespace: str | None = None) -> Any:
        return self.api.get_object(resource, name, namespace)

    def pods(self, cr: str, *, validation: bool = False) -> list[dict[str, Any]]:
        """The package pods of ``cr`` (``validation``: its validation pods instead)."""
        prefix = resources.PODS.path(namespace=NAMESPACE) + "/"
        return [
            o
            for k, o in self.api.stored()
            if k.startswith(prefix)
            and (labels := o["metadata"].get("labels") or {}).get(caches.CR_LABEL) == cr
            and (VALIDATION_LABEL in labels) == validation
        ]

    def finish_pods(self, cr: str, *, validation: bool = False) -> None:
        """Every live pod of ``cr`` ends well, with the agent's result as termination message
        (``validation``: its validation pods pass)."""
        for pod in self.pods(cr, validation=validation):
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            labels = pod["metadata"]["labels"]
            if validation:
                message = ValidationResult(passed=True).to_termination_message()
            else:
                message = AgentResult(
                    package=labels["bridge.nodewright.io/package"]
                ).to_termination_message()
            self.end_pod(pod, message)

    def end_pod(self, pod: dict[str, Any], message: str, *, exit_code: int = 0) -> None:
        state = {"terminated": {"exitCode": exit_code, "message": message}}
        pod["status"] = {
            "phase": "Succeeded" if exit_code == 0 else "Failed",
            "containerStatuses": [{"name": "agent", "state": state}],
        }
        self.api.put(resources.PODS, pod)

    def validate(self, cr: str) -> None:
        """The check before cordon: a pass creates the validation pods, which then pass; the
        next ``step`` records that and lets the rollout start."""
        self.step(cr)
        self.finish_pods(cr, validation=True)

    def sync(self) -> None:
        """Refill the caches from the API's objects, decoded as the informers decode them."""
        by_kind: dict[str, list[dict[str, Any]]] = {}
        for path, obj in self.api.stored():
            by_kind.setdefault(path.split("/")[-2], []).append(obj)
        fresh = snapshot.stores_from(
            nodes=by_kind.get("nodes", ()),
            pods=by_kind.get("pods", ()),
            pdbs=by_kind.get("poddisruptionbudgets", ()),
            nodewrights=by_kind.get("nodewrights", ()),
            policies=by_kind.get("deploymentpolicies", ()),
            secrets=by_kind.get("secrets", ()),
        )
        for field in fields(snapshot.Stores):
            # as an informer does: only what changed is delivered (so a pass's kept rows and
            # views are reused here as they are in a cluster)
            mine, theirs = getattr(self.stores, field.name), getattr(fresh, field.name)
            old_keys, new_keys = mine.keys(), theirs.keys()  # copies, in the API's order
            kept = set(new_keys)
            for key in old_keys:
                if key not in kept:
                    mine.delete(key)
            for key in new_keys:
                obj = theirs.get(key)
                if mine.get(key) != obj:
                    mine.put(key, obj)

    def step(self, cr: str) -> Result:
        """Sync the caches and reconcile ``cr`` once."""
        self.sync()
        return self.reconciler.reconcile(cr)

    def posts(self, suffix: str) -> list[str]:
        return [p for m, p in self.api.requests if m == "POST" and p.endswith(suffix)]
