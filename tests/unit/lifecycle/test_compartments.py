"""Compartment construction, ceilings and the overlap tie-break (NodeWright's rules)."""

from __future__ import annotations

from typing import Any

import pytest

from lifecycle import compartments
from lifecycle.compartments import DEFAULT_COMPARTMENT
from lifecycle.spec import DeploymentPolicy, NodeWright, StrategyKind


def make_cr(**spec: Any) -> NodeWright:
    return NodeWright.model_validate({"metadata": {"name": "cr"}, "spec": spec})


def make_policy(
    default: dict[str, Any], comps: list[dict[str, Any]], name: str = "p"
) -> DeploymentPolicy:
    return DeploymentPolicy.model_validate(
        {"metadata": {"name": name}, "spec": {"default": default, "compartments": comps}}
    )


FIXED_DEFAULT = {"budget": {"count": 1}, "strategy": {"fixed": {}}}


def comp(
    name: str, labels: dict[str, str], budget: dict[str, int], strategy: str | None
) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "selector": {"matchLabels": labels}, "budget": budget}
    if strategy is not None:
        out["strategy"] = {strategy: {}}
    return out


@pytest.mark.parametrize(
    ("percent", "matched", "expected"),
    [(25, 10, 2), (30, 10, 3), (10, 5, 1), (33, 6, 1), (1, 100, 1), (50, 0, 0), (100, 7, 7)],
)
def test_percent_ceiling_rounds_down_but_never_below_one_node(
    percent: int, matched: int, expected: int
) -> None:
    assert compartments.ceiling(None, percent, matched) == expected


def test_count_ceiling_is_not_clamped_to_the_matched_nodes() -> None:
    assert compartments.ceiling(5, None, 2) == 5


@pytest.mark.parametrize(
    ("count", "percent", "matched", "expected"),
    [(3, None, 10, 3), (20, None, 2, 2), (0, None, 10, 1), (None, 25, 10, 2), (None, 0, 10, 1)],
)
def test_legacy_ceiling_clamps_to_the_nodes_and_to_at_least_one(
    count: int | None, percent: int | None, matched: int, expected: int
) -> None:
    assert compartments.ceiling(count, percent, matched, legacy=True) == expected


def test_cr_without_policy_or_budget_gets_one_default_compartment_of_all_nodes() -> None:
    (rule,) = compartments.build(make_cr(), None) or ()
    assert rule.name == DEFAULT_COMPARTMENT
    assert rule.legacy
    assert rule.ceiling(10) == 10
    pacing = rule.pacing_for(rule.ceiling(10))
    assert pacing.kind is StrategyKind.FIXED
    assert pacing.initial_batch == 10
    assert pacing.failure_threshold is None


def test_legacy_interruption_budget_becomes_the_fixed_batch() -> None:
    (rule,) = compartments.build(make_cr(interruptionBudget={"count": 3}), None) or ()
    assert rule.pacing_for(rule.ceiling(10)).initial_batch == 3


def test_policy_compartments_keep_their_order_and_default_comes_last() -> None:
    policy = make_policy(
        FIXED_DEFAULT,
        [comp("b", {"x": "1"}, {"count": 1}, "linear"), comp("a", {"x": "2"}, {"count": 1}, None)],
    )
    rules = compartments.build(make_cr(deploymentPolicy="p"), policy)
    assert rules is not None
    assert [r.name for r in rules] == ["b", "a", DEFAULT_COMPARTMENT]
    assert rules[1].pacing.kind is None


def test_missing_or_mismatched_policy_yields_no_compartments() -> None:
    policy = make_policy(FIXED_DEFAULT, [], name="other")
    assert compartments.build(make_cr(deploymentPolicy="p"), None) is None
    assert compartments.build(make_cr(deploymentPolicy="p"), policy) is None


def test_fixed_strategy_wins_an_overlap_against_exponential() -> None:
    """The e2e ``overlapping-selectors`` case: prod-us-west (fixed) beats the exponential ones."""
    policy = make_policy(
        FIXED_DEFAULT,
        [
            comp("us-west", {"region": "us-west"}, {"count": 2}, "exponential"),
            comp("production", {"env": "production"}, {"count": 2}, "exponential"),
            comp("prod-us-west", {"region": "us-west", "env": "production"}, {"count": 1}, "fixed"),
        ],
    )
    rules = compartments.build(make_cr(deploymentPolicy="p"), policy) or ()
    result = compartments.assign(
        rules,
        [
            ("both", {"region": "us-west", "env": "production"}),
            ("west", {"region": "us-west"}),
            ("none", {}),
        ],
    )
    assert result.of_node == {
        "both": "prod-us-west",
        "west": "us-west",
        "none": DEFAULT_COMPARTMENT,
    }
    assert result.members["prod-us-west"] == ("both",)


def test_linear_wins_against_exponential_even_with_more_capacity_left() -> None:
    policy = make_policy(
        FIXED_DEFAULT,
        [
            comp("us-west", {"region": "us-west"}, {"count": 20}, "exponential"),
            comp("production", {"env": "production"}, {"count": 10}, "linear"),
        ],
    )
    rules = compartments.build(make_cr(deploymentPolicy="p"), policy) or ()
    result = compartments.assign(rules, [("n", {"region": "us-west", "env": "production"})])
    assert result.of_node["n"] == "production"


def test_equal_strategies_break_ties_by_capacity_over_the_raw_selector_matches() -> None:
    """Both 50%: "wide" matches 10 nodes (capacity 5), "narrow" matches 4 (capacity 2)."""
    policy = make_policy(
        FIXED_DEFAULT,
        [
            comp("a-wide", {"wide": "y"}, {"percent": 50}, "exponential"),
            comp("z-narrow", {"narrow": "y"}, {"percent": 50}, "exponential"),
        ],
    )
    rules = compartments.build(make_cr(deploymentPolicy="p"), policy) or ()
    nodes = [(f"w{i}", {"wide": "y"}) for i in range(6)]
    nodes += [(f"b{i}", {"wide": "y", "narrow": "y"}) for i in range(4)]
    result = compartments.assign(rules, nodes)
    assert all(result.of_node[f"b{i}"] == "z-narrow" for i in range(4))
    assert result.ceilings == {"a-wide": 3, "z-narrow": 2, DEFAULT_COMPARTMENT: 1}


def test_equal_strategy_and_capacity_break_ties_by_name() -> None:
    policy = make_policy(
        FIXED_DEFAULT,
        [
            comp("beta", {"a": "1"}, {"count": 2}, "linear"),
            comp("alpha", {"b": "1"}, {"count": 2}, "linear"),
        ],
    )
    rules = compartments.build(make_cr(deploymentPolicy="p"), policy) or ()
    assert compartments.assign(rules, [("n", {"a": "1", "b": "1"})]).of_node["n"] == "alpha"


def test_no_strategy_is_the_least_safe_choice_in_an_overlap() -> None:
    policy = make_policy(
        FIXED_DEFAULT,
        [
            comp("plain", {"a": "1"}, {"count": 1}, None),
            comp("grow", {"b": "1"}, {"count": 50}, "exponential"),
        ],
    )
    rules = compartments.build(make_cr(deploymentPolicy="p"), policy) or ()
    assert compartments.assign(rules, [("n", {"a": "1", "b": "1"})]).of_node["n"] == "grow"


def test_matched_counts_only_assigned_nodes_and_ceilings_follow_them() -> None:
    policy = make_policy(
        {"budget": {"percent": 50}, "strategy": {"fixed": {}}},
        [comp("gpu", {"gpu": "yes"}, {"percent": 50}, "fixed")],
    )
    rules = compartments.build(make_cr(deploymentPolicy="p"), policy) or ()
    nodes = [(f"g{i}", {"gpu": "yes"}) for i in range(4)] + [(f"c{i}", {}) for i in range(6)]
    result = compartments.assign(rules, nodes)
    assert {k: len(v) for k, v in result.members.items()} == {"gpu": 4, DEFAULT_COMPARTMENT: 6}
    assert result.ceilings == {"gpu": 2, DEFAULT_COMPARTMENT: 3}
