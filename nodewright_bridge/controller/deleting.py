"""What deleting a NodeWright waits for, read from the Nodes (the cleanup itself is planned by
``lifecycle.releasing.plan_deletion``).

Deletion is held while any node's state annotation of the CR does not parse (cleaning up would
forget what that node runs: ``DeletionBlocked``/``MalformedNodeState`` names it), and runs the
CR's uninstalls first - the packages with ``uninstall.enabled`` - while any node still records
one of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lifecycle.nodestate import state_annotation
from lifecycle.spec import NodeWright
from nodewright_bridge.controller import snapshot


def malformed_states(cr: str, nodes: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Nodes whose state annotation of CR ``cr`` does not parse, with the parse error."""
    key = state_annotation(cr)
    out: dict[str, str] = {}
    for node in nodes:
        try:
            snapshot.parse_state(snapshot.annotations_of(node).get(key))
        except ValueError as exc:
            out[str(snapshot.meta_of(node).get("name", ""))] = str(exc) or "does not parse"
    return out


def uninstall_pending(
    variant: NodeWright,
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]] = (),
) -> list[str]:
    """Nodes whose state still records a package that deletion must uninstall (``variant``: the
    CR as deletion runs it, ``lifecycle.releasing.uninstall_variant``), or whose pod of the CR
    (``pods``) carries the start of one (``lifecycle.pod_records``): it may have applied it."""
    keys = {f"{n}|{p.version}" for n, p in variant.spec.packages.items()}
    out = {
        node
        for node, carrying in snapshot.carrying_by_node(pods).items()
        if any(f"{pod.package}|{pod.version}" in keys for pod in carrying)
    }
    for node in nodes:
        text = snapshot.annotations_of(node).get(state_annotation(variant.metadata.name))
        try:
            state = snapshot.parse_state(text)
        except ValueError:
            continue
        if keys & set(state):
            out.add(str(snapshot.meta_of(node).get("name", "")))
    return sorted(out)
