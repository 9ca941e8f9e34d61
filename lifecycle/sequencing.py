"""Ordering between NodeWright CRs, and the pause / disable switches (as NodeWright does).

Why here and not in the controller: "may CR S touch node N now?" depends on every other CR's
progress, and getting it wrong reboots a node twice or runs a tuning role before the driver it
needs. It is a small pure function of (priority, name, sequencing, flags, per-node completion).

Rules:
- CRs are ordered by ``(priority, name)``; lower priority numbers go first.
- Node N is ready for CR S iff every *earlier*, non-disabled CR O satisfies: O.sequencing=node and
  O targets N -> O is complete on N, or O holds N cordoned for its cycle (``joinable_on``: S joins
  the cordon, and the work is ordered and the interrupt shared by ``lifecycle.peering``, so N is
  disrupted once); O.sequencing=all -> O is complete on every node it targets.
- A paused CR still blocks later ones (unless already complete where it matters); a disabled CR
  is treated as if it did not exist.
- ``bridge.nodewright.io/pause`` / ``disable`` are active only with the exact value ``"true"``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from lifecycle.nodestate import DISABLE_ANNOTATION, PAUSE_ANNOTATION
from lifecycle.spec import NodeWright, Sequencing


def is_paused(annotations: Mapping[str, str]) -> bool:
    """``bridge.nodewright.io/pause: "true"`` on the CR: no new work, running pods finish."""
    return annotations.get(PAUSE_ANNOTATION) == "true"


def is_disabled(annotations: Mapping[str, str]) -> bool:
    """``bridge.nodewright.io/disable: "true"``: no new work and later CRs ignore this one."""
    return annotations.get(DISABLE_ANNOTATION) == "true"


@dataclass(frozen=True, slots=True)
class CRProgress:
    """What sequencing needs to know about one CR.

    Attributes:
        name: CR name.
        priority: lower goes first.
        sequencing: node (gates later CRs per node) or all (gates them fleet-wide).
        targets: nodes the CR selects.
        complete_on: nodes where the CR is complete (no pending work).
        joinable_on: nodes the CR holds cordoned while in progress there (later CRs may join).
        paused: the pause annotation is set.
        disabled: the disable annotation is set.
    """

    name: str
    priority: int
    sequencing: Sequencing
    targets: frozenset[str]
    complete_on: frozenset[str]
    joinable_on: frozenset[str] = frozenset()
    paused: bool = False
    disabled: bool = False

    @property
    def complete_everywhere(self) -> bool:
        return self.targets <= self.complete_on

    @classmethod
    def of(
        cls,
        cr: NodeWright,
        *,
        targets: Iterable[str],
        complete_on: Iterable[str],
        joinable_on: Iterable[str] = (),
    ) -> CRProgress:
        """Build from a CR object plus the controller's per-node completion facts."""
        annotations = cr.metadata.annotations
        return cls(
            name=cr.metadata.name,
            priority=cr.spec.priority,
            sequencing=cr.spec.sequencing,
            targets=frozenset(targets),
            complete_on=frozenset(complete_on),
            joinable_on=frozenset(joinable_on),
            paused=is_paused(annotations),
            disabled=is_disabled(annotations),
        )


def ordered(crs: Iterable[CRProgress]) -> list[CRProgress]:
    """CRs in rollout order: priority ascending, then name."""
    return sorted(crs, key=lambda c: (c.priority, c.name))


def _earlier(name: str, crs: Sequence[CRProgress]) -> list[CRProgress]:
    order = ordered(crs)
    names = [c.name for c in order]
    if name not in names:
        raise KeyError(name)
    return [c for c in order[: names.index(name)] if not c.disabled]


def node_ready(name: str, node: str, crs: Sequence[CRProgress]) -> bool:
    """Whether CR ``name`` may work on ``node`` as far as earlier CRs are concerned."""
    return not node_blockers(name, node, crs)


def node_blockers(name: str, node: str, crs: Sequence[CRProgress]) -> list[str]:
    """The earlier CRs that keep ``node`` waiting for CR ``name`` (empty when it is ready)."""
    return _blockers(node, _earlier(name, crs))


def _blockers(node: str, earlier: Sequence[CRProgress]) -> list[str]:
    blockers: list[str] = []
    for other in earlier:
        if other.sequencing is Sequencing.ALL:
            if not other.complete_everywhere:
                blockers.append(other.name)
        elif (
            node in other.targets
            and node not in other.complete_on
            and node not in other.joinable_on
        ):
            blockers.append(other.name)
    return blockers


def waiting_on_all(name: str, crs: Sequence[CRProgress]) -> list[str]:
    """Earlier ``sequencing: all`` CRs not complete everywhere: the whole CR shows ``waiting``."""
    return [
        o.name
        for o in _earlier(name, crs)
        if o.sequencing is Sequencing.ALL and not o.complete_everywhere
    ]


def ready_nodes(name: str, crs: Sequence[CRProgress]) -> frozenset[str]:
    """The nodes CR ``name`` targets that are ready for it."""
    by_name = {c.name: c for c in crs}
    earlier = _earlier(name, crs)
    return frozenset(n for n in by_name[name].targets if not _blockers(n, earlier))
