"""The API resources the controller talks to, as plain descriptors.

Why descriptors instead of the generated ``CoreV1Api`` / ``CustomObjectsApi`` methods: one generic
code path (:mod:`nodewright_bridge.k8s.rest`) lists, watches and patches every kind alike and keeps
objects as raw ``dict`` (no model deserialisation: that is most of the CPU and memory of a 5,000
node cache).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from lifecycle.spec import API_GROUP, API_VERSION


@dataclass(frozen=True, slots=True)
class Resource:
    """One REST resource: ``group/version``, plural, kind, and whether it lives in a namespace."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, *, namespace: str | None = None, name: str | None = None, subresource: str = ""
    ) -> str:
        """The URL path of the collection, or of one object (and its subresource)."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            root += f"/namespaces/{quote(namespace, safe='')}"
        elif self.namespaced and name is not None:
            raise ValueError(f"{self.plural} is namespaced: a namespace is required")
        path = f"{root}/{self.plural}"
        if name is not None:
            path += f"/{quote(name, safe='')}"
            if subresource:
                path += f"/{subresource}"
        return path


NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
PODS = Resource("", "v1", "pods", "Pod", namespaced=True)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)
SECRETS = Resource("", "v1", "secrets", "Secret", namespaced=True)
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", namespaced=True)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
EVENTS = Resource("events.k8s.io", "v1", "events", "Event", namespaced=True)
NODEWRIGHTS = Resource(API_GROUP, API_VERSION, "nodewrights", "NodeWright", namespaced=False)
DEPLOYMENT_POLICIES = Resource(
    API_GROUP, API_VERSION, "deploymentpolicies", "DeploymentPolicy", namespaced=False
)
