"""Compartments of a rollout: which group each node belongs to and how many may change at once.

Why recomputed from scratch every time (as NodeWright does): labels change, policies are edited
and nodes come and go; the only persisted rollout facts are the batch records on the Nodes and the
batch state in the CR status, both keyed by compartment *name*. Everything here is a pure function
of the CR, the policy and the nodes' labels.

- A CR with a DeploymentPolicy gets one compartment per policy compartment plus ``__default__``
  (the policy's default budget and strategy) for nodes no compartment selects.
- A CR without a policy gets only ``__default__``: legacy ``interruptionBudget`` (or all nodes at
  once when it has none) as a fixed strategy whose batch is the legacy ceiling, no failure stop.
- A node matched by several compartments goes to the safest one: fixed < linear < exponential <
  no strategy, then the smaller capacity (ceiling of the budget over the nodes the compartment's
  own selector matches, at least 1), then the name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from lifecycle import batching, selectors
from lifecycle.spec import DeploymentPolicy, LabelSelector, NodeWright, StrategyKind

DEFAULT_COMPARTMENT = "__default__"

# Tie-break rank of a strategy: the safest (smallest, slowest to grow) first (NodeWright's order).
_SAFETY_RANK: Mapping[StrategyKind | None, int] = {
    StrategyKind.FIXED: 0,
    StrategyKind.LINEAR: 1,
    StrategyKind.EXPONENTIAL: 2,
    None: 3,
}


@dataclass(frozen=True, slots=True)
class CompartmentRule:
    """One compartment's definition, before nodes are assigned.

    ``selector`` is None for ``__default__``. ``legacy`` marks the synthetic compartment of a CR
    without a policy: its ceiling uses the legacy rounding and its fixed batch *is* the ceiling.
    """

    name: str
    selector: LabelSelector | None
    count: int | None
    percent: int | None
    pacing: batching.Pacing
    legacy: bool = False

    def ceiling(self, matched: int) -> int:
        """The budget ceiling for ``matched`` nodes (see ``ceiling``)."""
        return ceiling(self.count, self.percent, matched, legacy=self.legacy)

    def pacing_for(self, ceiling_value: int) -> batching.Pacing:
        """The effective pacing: the legacy fixed batch is the ceiling (as in NodeWright)."""
        if not self.legacy:
            return self.pacing
        return batching.Pacing(kind=StrategyKind.FIXED, initial_batch=max(1, ceiling_value))


def ceiling(count: int | None, percent: int | None, matched: int, *, legacy: bool = False) -> int:
    """How many nodes of a compartment may change at once (NodeWright's rounding).

    Policy budgets: ``count`` as is (not clamped to the node count); ``percent`` is 0 for an empty
    compartment, else ``max(1, floor(matched * percent / 100))``. Legacy interruptionBudget:
    ``count`` -> ``max(1, min(matched, count))``; ``percent`` -> ``max(1, floor(...))``, so a zero
    budget still moves one node at a time.
    """
    pct = 100 if percent is None else percent
    if legacy:
        if count is not None:
            return max(1, min(matched, count))
        return max(1, matched * pct // 100)
    if count is not None:
        return count
    if matched == 0:
        return 0
    return max(1, matched * pct // 100)


def build(cr: NodeWright, policy: DeploymentPolicy | None) -> tuple[CompartmentRule, ...] | None:
    """The compartments of ``cr``: policy order, ``__default__`` last.

    Returns None when the CR names a policy that was not given (or whose name differs): nothing
    may be scheduled then and the CR reports ``PolicyNotFound``.
    """
    wanted = cr.spec.deployment_policy
    if not wanted:
        legacy = cr.spec.interruption_budget
        count = None if legacy is None else legacy.count
        percent = None if legacy is None else legacy.percent
        default = CompartmentRule(
            name=DEFAULT_COMPARTMENT,
            selector=None,
            count=count,
            percent=100 if count is None and percent is None else percent,
            pacing=batching.Pacing(kind=StrategyKind.FIXED),
            legacy=True,
        )
        return (default,)
    if policy is None or policy.metadata.name != wanted:
        return None
    rules = [
        CompartmentRule(
            name=c.name,
            selector=c.selector,
            count=c.budget.count,
            percent=c.budget.percent,
            pacing=batching.pacing_from(c.strategy),
        )
        for c in policy.spec.compartments
    ]
    rules.append(
        CompartmentRule(
            name=DEFAULT_COMPARTMENT,
            selector=None,
            count=policy.spec.default.budget.count,
            percent=policy.spec.default.budget.percent,
            pacing=batching.pacing_from(policy.spec.default.strategy),
        )
    )
    return tuple(rules)


@dataclass(frozen=True, slots=True)
class Assignment:
    """Nodes assigned to compartments.

    Attributes:
        rules: the compartments, in policy order with ``__default__`` last.
        of_node: node name -> compartment name.
        members: compartment name -> assigned node names (input order), for every rule.
        ceilings: compartment name -> ceiling over the assigned nodes.
    """

    rules: tuple[CompartmentRule, ...]
    of_node: Mapping[str, str]
    members: Mapping[str, tuple[str, ...]]
    ceilings: Mapping[str, int]

    def rule(self, name: str) -> CompartmentRule:
        for rule in self.rules:
            if rule.name == name:
                return rule
        raise KeyError(name)


def assign(
    rules: Sequence[CompartmentRule], nodes: Iterable[tuple[str, Mapping[str, str]]]
) -> Assignment:
    """Assign each ``(name, labels)`` to one compartment (the tie-break in the module docstring)."""
    node_list = list(nodes)
    selected = [r for r in rules if r.selector is not None]
    raw_matches: dict[str, list[str]] = {r.name: [] for r in selected}
    for name, labels in node_list:
        for rule in selected:
            assert rule.selector is not None  # narrowed by the list comprehension above
            if selectors.matches(rule.selector, labels):
                raw_matches[rule.name].append(name)
    capacity = {r.name: max(1, r.ceiling(len(raw_matches[r.name]))) for r in selected}

    def tie_break(rule: CompartmentRule) -> tuple[int, int, str]:
        return (_SAFETY_RANK[rule.pacing.kind], capacity[rule.name], rule.name)

    # only the nodes some rule matched (a list per node of a 5,000-node fleet, every pass,
    # would be garbage for the collector to walk)
    matched_by: dict[str, list[CompartmentRule]] = {}
    for rule in selected:
        for name in raw_matches[rule.name]:
            matched_by.setdefault(name, []).append(rule)
    of_node: dict[str, str] = {}
    members: dict[str, list[str]] = {r.name: [] for r in rules}
    for name, _ in node_list:
        candidates = matched_by.get(name)
        chosen = min(candidates, key=tie_break).name if candidates else DEFAULT_COMPARTMENT
        of_node[name] = chosen
        members[chosen].append(name)
    return Assignment(
        rules=tuple(rules),
        of_node=of_node,
        members={k: tuple(v) for k, v in members.items()},
        ceilings={r.name: r.ceiling(len(members[r.name])) for r in rules},
    )
