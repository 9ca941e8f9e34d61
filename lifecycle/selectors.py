"""Label selectors and taint tolerations with exactly Kubernetes' semantics.

Why our own: ``lifecycle`` may not import the Kubernetes client, yet the planner must decide which
nodes a CR or a compartment selects and whether a node's taints block package pods, the same way
the API server and scheduler would. Two rules that surprise people and are kept on purpose:
``NotIn`` (and ``DoesNotExist``) match a node that does not have the key at all, and a toleration
with an empty key and operator ``Exists`` tolerates every taint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lifecycle.spec import LabelSelector, LabelSelectorRequirement, Toleration

# One canonical requirement: (key, operator, values). matchLabels k=v becomes (k, "In", {v}).
CanonicalRequirement = tuple[str, str, frozenset[str]]


def requirement_matches(requirement: LabelSelectorRequirement, labels: Mapping[str, str]) -> bool:
    """Whether one set-based requirement holds for ``labels`` (Kubernetes semantics)."""
    operator = str(requirement.operator)
    present = requirement.key in labels
    if operator == "In":
        return present and labels[requirement.key] in requirement.values
    if operator == "NotIn":
        return not present or labels[requirement.key] not in requirement.values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    raise ValueError(f"unknown selector operator {operator!r}")


def matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy every matchLabels entry and every matchExpressions requirement.

    An empty selector matches everything (a present-but-empty LabelSelector in Kubernetes).
    """
    for key, value in selector.match_labels.items():
        if labels.get(key) != value:
            return False
    return all(requirement_matches(r, labels) for r in selector.match_expressions)


def canonical(selector: LabelSelector) -> frozenset[CanonicalRequirement]:
    """An order-independent form of a selector, for equality checks.

    ``matchLabels: {k: v}`` and ``matchExpressions: [{key: k, operator: In, values: [v]}]`` select
    the same nodes and have the same canonical form; value order and duplicates do not matter.
    """
    reqs: set[CanonicalRequirement] = {
        (key, "In", frozenset({value})) for key, value in selector.match_labels.items()
    }
    reqs.update((r.key, str(r.operator), frozenset(r.values)) for r in selector.match_expressions)
    return frozenset(reqs)


def selectors_equal(a: LabelSelector, b: LabelSelector) -> bool:
    """True when the two selectors are written the same way up to order (see ``canonical``)."""
    return canonical(a) == canonical(b)


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint ``key=value:effect`` (value may be empty)."""

    key: str
    effect: TaintEffect
    value: str = ""

    def __str__(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """Kubernetes' ``Toleration.ToleratesTaint``.

    An empty effect matches every effect; an empty key matches every key (only meaningful with
    ``Exists``); operator ``Exists`` ignores the value; ``Equal`` (or empty) compares values, where
    a missing value equals the empty string.
    """
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    if toleration.operator in ("Equal", ""):
        return (toleration.value or "") == taint.value
    return False


def untolerated_taints(taints: Iterable[Taint], tolerations: Sequence[Toleration]) -> list[Taint]:
    """The taints (in input order) that no toleration tolerates. Every effect counts."""
    return [t for t in taints if not any(tolerates(tol, t) for tol in tolerations)]
