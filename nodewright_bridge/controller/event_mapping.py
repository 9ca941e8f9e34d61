"""Which NodeWrights an informer event may concern: the reconciler's ``keys_for``.

Level-triggered reconciles never learn the event, only the key; the mapping only has to be cheap
and complete at thousands of nodes: a Node or workload Pod maps to the CRs that target the node
(label match against the parsed-CR cache) or whose keys it carries; our pods carry their CR as a
label; a PDB change maps to every CR (there are few); a policy or a Secret to the CRs that name
it; a CR to itself and every CR after it in priority order (sequencing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from lifecycle import selectors
from lifecycle.nodestate import batch_annotation, state_annotation
from lifecycle.spec import NodeWright
from nodewright_bridge.controller import snapshot
from nodewright_bridge.k8s import caches

Parse = Callable[[Mapping[str, Any]], NodeWright | snapshot.InvalidCR]


def keys_for(
    informer: str,
    obj: Mapping[str, Any],
    stores: snapshot.Stores,
    parse: Parse,
    all_crs: Callable[[], list[NodeWright]],
) -> Iterable[str]:
    if informer == caches.NODEWRIGHTS:
        name = str(snapshot.meta_of(obj).get("name", ""))
        parsed = parse(obj) if obj.get("spec") is not None else None
        later = []
        if isinstance(parsed, NodeWright):
            order = (parsed.spec.priority, name)
            later = [
                c.metadata.name for c in all_crs() if (c.spec.priority, c.metadata.name) > order
            ]
        return [name, *later]
    if informer == caches.PACKAGE_PODS:
        cr = snapshot.labels_of(obj).get(snapshot.LABEL_CR)
        return [cr] if cr else []
    if informer == caches.POLICIES:
        policy = str(snapshot.meta_of(obj).get("name", ""))
        return [c.metadata.name for c in all_crs() if c.spec.deployment_policy == policy]
    if informer == caches.PDBS:
        return [c.metadata.name for c in all_crs()]
    if informer == caches.SECRETS:
        secret = str(snapshot.meta_of(obj).get("name", ""))
        return [c.metadata.name for c in all_crs() if _uses_secret(c, secret)]
    if informer == caches.NODES:
        return crs_for_node(obj, all_crs())
    if informer == caches.PODS:
        node_name = (obj.get("spec") or {}).get("nodeName")
        node = stores.nodes.get(node_name) if node_name else None
        return crs_for_node(node, all_crs()) if node is not None else []
    return []


def crs_for_node(node: Mapping[str, Any], crs: Iterable[NodeWright]) -> list[str]:
    """The CRs that target ``node`` or whose keys it carries."""
    labels = snapshot.labels_of(node)
    annotations = snapshot.annotations_of(node)
    out = []
    for cr in crs:
        name = cr.metadata.name
        if (
            selectors.matches(cr.spec.node_selectors, labels)
            or state_annotation(name) in annotations
            or batch_annotation(name) in annotations
        ):
            out.append(name)
    return out


def _uses_secret(cr: NodeWright, secret: str) -> bool:
    return any(
        ref.secret_name == secret for pkg in cr.spec.packages.values() for ref in pkg.secret_vars
    )
