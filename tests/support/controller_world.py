"""The real reconciler and executor on an in-memory API (``nodewright_bridge.testing``), for unit
tests of the pass's steps: the caches are refilled from the API's objects on ``sync()``, pods
end when a test says so, and every request is recorded in order."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from lifecycle.results import AgentResult
from nodewright_bridge.controller import snapshot
from nodewright_bridge.controller.productmetrics import ProductMetrics
from nodewright_bridge.controller.reconciler import NodeWrightReconciler
from nodewright_bridge.k8s import caches, resources, slimming, store
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
        by_node = {caches.BY_NODE: store.by_node_name}
        self.stores = snapshot.Stores(
            nodes=store.Store(),
            pods=store.Store(by_node),
            package_pods=store.Store(
                {caches.BY_NODE: store.by_node_name, caches.BY_CR: store.by_label(caches.CR_LABEL)}
            ),
            pdbs=store.Store({caches.BY_NAMESPACE: store.by_namespace}),
            nodewrights=store.Store(),
            policies=store.Store(),
            secrets=store.Store(),
        )
        self.reconciler = NodeWrightReconciler(
            rest=self.api,
            writer=Writer(self.api),
            events=EventRecorder(self.api, clock=self.clock, instance="test"),
            stores=self.stores,
            namespace=NAMESPACE,
            metrics=ProductMetrics(CollectorRegistry()),
            clock=self.clock,
        )

    # -- the cluster -------------------------------------------------------------------------

    def add(self, resource: resources.Resource, obj: dict[str, Any]) -> None:
        self.api.put(resource, obj)

    def obj(self, resource: resources.Resource, name: str, namespace: str | None = None) -> Any:
        return self.api.get_object(resource, name, namespace)

    def pods(self, cr: str) -> list[dict[str, Any]]:
        prefix = resources.PODS.path(namespace=NAMESPACE) + "/"
        return [
            o
            for k, o in self.api.objects.items()
            if k.startswith(prefix)
            and (o["metadata"].get("labels") or {}).get(caches.CR_LABEL) == cr
        ]

    def finish_pods(self, cr: str) -> None:
        """Every live pod of ``cr`` ends well, with the agent's result as termination message."""
        for pod in self.pods(cr):
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            labels = pod["metadata"]["labels"]
            result = AgentResult(package=labels["bridge.nodewright.io/package"])
            state = {"terminated": {"exitCode": 0, "message": result.to_termination_message()}}
            pod["status"] = {
                "phase": "Succeeded",
                "containerStatuses": [{"name": "agent", "state": state}],
            }
            self.api.put(resources.PODS, pod)

    def sync(self) -> None:
        """Refill the caches from the API's objects, slimmed as the informers slim them."""
        stores = self.stores
        for cache in (
            stores.nodes,
            stores.pods,
            stores.package_pods,
            stores.pdbs,
            stores.nodewrights,
            stores.policies,
            stores.secrets,
        ):
            cached = cache.keys()  # a copy: deleting while walking it is safe
            for key in cached:
                cache.delete(key)
        for path, obj in self.api.objects.items():
            kind = path.split("/")[-2]
            key = store.object_key(obj)
            if kind == "nodes":
                stores.nodes.put(key, slimming.slim_node(obj))
            elif kind == "pods":
                ours = obj["metadata"].get("labels", {}).get(caches.MANAGED_BY_LABEL)
                cache = stores.package_pods if ours == caches.MANAGED_BY_VALUE else stores.pods
                cache.put(key, slimming.slim_pod(obj))
            elif kind == "poddisruptionbudgets":
                stores.pdbs.put(key, obj)
            elif kind == "nodewrights":
                stores.nodewrights.put(key, obj)
            elif kind == "deploymentpolicies":
                stores.policies.put(key, obj)
            elif kind == "secrets":
                stores.secrets.put(key, slimming.slim_secret(obj))

    def step(self, cr: str) -> Result:
        """Sync the caches and reconcile ``cr`` once."""
        self.sync()
        return self.reconciler.reconcile(cr)

    def posts(self, suffix: str) -> list[str]:
        return [p for m, p in self.api.requests if m == "POST" and p.endswith(suffix)]
