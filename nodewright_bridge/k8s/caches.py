"""The controller's informers: which objects it caches, filtered how, indexed by what.

Memory is the constraint (1,000-5,000 nodes, 150 MB budget), so every informer filters on the
server and slims on arrival:

- ``nodes``: every Node (targeting is by label and changes at runtime), slimmed to taints,
  unschedulable, conditions and bootID.
- ``pods``: workload pods that are bound to a node and not finished (``spec.nodeName!=``, phase not
  Succeeded/Failed), excluding ours. Drain, PDB checks and ``podNonInterruptLabels`` need exactly
  these. Targeted nodes change at runtime, so we cannot filter by node on the server; finished pods
  leave the cache through the field selector (the API server sends DELETED when a pod stops
  matching).
- ``package-pods``: our own pods in the controller namespace, *including* finished ones (their
  termination message is the agent's result).
- ``pdbs``: every PodDisruptionBudget (small, and any namespace's pods may be on a target node).
- ``nodewrights`` and ``policies``: the two CRs, resynced every 10 minutes.
- ``secrets``: Secrets in the controller namespace (where ``secretVars`` must live), slimmed to a
  digest per key: a changed secret is a config change of the packages that use it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from nodewright_bridge.clock import Clock
from nodewright_bridge.k8s import resources, slimming, store
from nodewright_bridge.k8s.rest import Rest
from nodewright_bridge.k8s.watching import Informer, InformerSpec
from nodewright_bridge.metrics import Metrics

logger = logging.getLogger(__name__)

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "nodewright-bridge"
CR_LABEL = "bridge.nodewright.io/cr"

NODES = "nodes"
PODS = "pods"
PACKAGE_PODS = "package-pods"
PDBS = "pdbs"
NODEWRIGHTS = "nodewrights"
POLICIES = "policies"
SECRETS = "secrets"

# Index names.
BY_NODE = "node"
BY_NAMESPACE = "namespace"
BY_CR = "cr"

# A level-triggered safety net: every CR is reconciled at least this often even if no event
# arrives (a missed event, a deadline the reconciler forgot to requeue for). Ten minutes costs
# nothing at our CR counts.
CR_RESYNC_SECONDS = 600.0


def standard_specs(namespace: str) -> list[InformerSpec]:
    """The informers the controller runs, for the controller namespace ``namespace``."""
    return [
        InformerSpec(name=NODES, resource=resources.NODES, slim=slimming.slim_node),
        InformerSpec(
            name=PODS,
            resource=resources.PODS,
            field_selector="spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed",
            label_selector=f"{MANAGED_BY_LABEL}!={MANAGED_BY_VALUE}",
            slim=slimming.slim_pod,
            indexers={BY_NODE: store.by_node_name, BY_NAMESPACE: store.by_namespace},
        ),
        InformerSpec(
            name=PACKAGE_PODS,
            resource=resources.PODS,
            namespace=namespace,
            label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}",
            slim=slimming.slim_pod,
            indexers={BY_NODE: store.by_node_name, BY_CR: store.by_label(CR_LABEL)},
        ),
        InformerSpec(
            name=PDBS,
            resource=resources.PDBS,
            indexers={BY_NAMESPACE: store.by_namespace},
        ),
        InformerSpec(
            name=NODEWRIGHTS, resource=resources.NODEWRIGHTS, resync_period=CR_RESYNC_SECONDS
        ),
        InformerSpec(
            name=POLICIES, resource=resources.DEPLOYMENT_POLICIES, resync_period=CR_RESYNC_SECONDS
        ),
        InformerSpec(
            name=SECRETS, resource=resources.SECRETS, namespace=namespace, slim=slimming.slim_secret
        ),
    ]


class InformerSet:
    """Named informers started, synced and stopped together."""

    def __init__(
        self,
        rest: Rest,
        specs: list[InformerSpec],
        *,
        metrics: Metrics | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._informers = {
            spec.name: Informer(rest, spec, metrics=metrics, clock=clock) for spec in specs
        }

    def __getitem__(self, name: str) -> Informer:
        return self._informers[name]

    def __iter__(self) -> Iterator[Informer]:
        return iter(self._informers.values())

    def store(self, name: str) -> store.Store:
        return self._informers[name].store

    def start(self) -> None:
        for informer in self._informers.values():
            informer.start()

    def stop(self) -> None:
        for informer in self._informers.values():
            informer.stop()

    def synced(self) -> bool:
        return all(i.has_synced() for i in self._informers.values())

    def wait_for_sync(self, timeout: float) -> bool:
        return all(i.wait_for_sync(timeout) for i in self._informers.values())
