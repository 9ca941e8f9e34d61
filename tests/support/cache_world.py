"""Empty in-memory informer stores, indexed as the controller's are, for snapshot-level tests."""

from __future__ import annotations

from nodewright_bridge.controller import snapshot
from nodewright_bridge.k8s import store


def empty_stores() -> snapshot.Stores:
    by_node = {"node": store.by_node_name}
    return snapshot.Stores(
        nodes=store.Store(),
        pods=store.Store(by_node),
        package_pods=store.Store(by_node),
        pdbs=store.Store(),
        nodewrights=store.Store(),
        policies=store.Store(),
        secrets=store.Store(),
    )
