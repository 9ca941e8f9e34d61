"""Label selectors and tolerations behave exactly like Kubernetes'."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lifecycle import selectors
from lifecycle.selectors import Taint, TaintEffect
from lifecycle.spec import LabelSelector, LabelSelectorRequirement, SelectorOperator, Toleration


def sel(**kwargs: Any) -> LabelSelector:
    return LabelSelector.model_validate(kwargs)


def req(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        (sel(), {}, True),
        (sel(), {"a": "1"}, True),
        (sel(matchLabels={"a": "1"}), {"a": "1", "b": "2"}, True),
        (sel(matchLabels={"a": "1"}), {"a": "2"}, False),
        (sel(matchLabels={"a": "1"}), {}, False),
        (sel(matchExpressions=[req("a", "In", "1", "2")]), {"a": "2"}, True),
        (sel(matchExpressions=[req("a", "In", "1", "2")]), {"a": "3"}, False),
        (sel(matchExpressions=[req("a", "In", "1")]), {}, False),
        (sel(matchExpressions=[req("a", "NotIn", "1")]), {"a": "2"}, True),
        (sel(matchExpressions=[req("a", "NotIn", "1")]), {"a": "1"}, False),
        (sel(matchExpressions=[req("a", "NotIn", "1")]), {}, True),  # missing key matches NotIn
        (sel(matchExpressions=[req("a", "Exists")]), {"a": ""}, True),
        (sel(matchExpressions=[req("a", "Exists")]), {"b": "1"}, False),
        (sel(matchExpressions=[req("a", "DoesNotExist")]), {}, True),
        (sel(matchExpressions=[req("a", "DoesNotExist")]), {"a": "x"}, False),
        (sel(matchLabels={"a": "1"}, matchExpressions=[req("b", "Exists")]), {"a": "1"}, False),
        (
            sel(matchLabels={"a": "1"}, matchExpressions=[req("b", "Exists")]),
            {"a": "1", "b": ""},
            True,
        ),
    ],
)
def test_selector_matching_follows_kubernetes(
    selector: LabelSelector, labels: dict[str, str], expected: bool
) -> None:
    assert selectors.matches(selector, labels) is expected


KEYS = ["a", "b", "c"]
VALUES = ["1", "2", "3"]
labels_st = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3)


@st.composite
def requirements(draw: st.DrawFn) -> LabelSelectorRequirement:
    op = draw(st.sampled_from(list(SelectorOperator)))
    values: list[str] = []
    if op in (SelectorOperator.IN, SelectorOperator.NOT_IN):
        values = draw(st.lists(st.sampled_from(VALUES), min_size=1, max_size=3))
    return LabelSelectorRequirement(key=draw(st.sampled_from(KEYS)), operator=op, values=values)


selectors_st = st.builds(
    LabelSelector,
    match_labels=st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=2),
    match_expressions=st.lists(requirements(), max_size=3),
)


def oracle(selector: LabelSelector, labels: dict[str, str]) -> bool:
    """Brute force: the set of label sets a requirement admits, by enumerating the universe."""
    absent = None
    for key, value in selector.match_labels.items():
        if labels.get(key, absent) != value:
            return False
    for r in selector.match_expressions:
        current = labels.get(r.key, absent)
        admitted: set[str | None]
        if r.operator == SelectorOperator.IN:
            admitted = set(r.values)
        elif r.operator == SelectorOperator.NOT_IN:
            admitted = {absent, *VALUES} - set(r.values)
        elif r.operator == SelectorOperator.EXISTS:
            admitted = set(VALUES)
        else:
            admitted = {absent}
        if current not in admitted:
            return False
    return True


@given(selectors_st, labels_st)
def test_selector_matching_agrees_with_a_brute_force_oracle(
    selector: LabelSelector, labels: dict[str, str]
) -> None:
    assert selectors.matches(selector, labels) is oracle(selector, labels)


ALL_LABEL_SETS = [
    {k: v for k, v in zip(KEYS, combo, strict=True) if v is not None}
    for combo in [
        (a, b, c) for a in [None, *VALUES] for b in [None, *VALUES] for c in [None, *VALUES]
    ]
]


@given(selectors_st, selectors_st)
def test_equal_selectors_select_the_same_label_sets(a: LabelSelector, b: LabelSelector) -> None:
    if selectors.selectors_equal(a, b):
        assert [selectors.matches(a, ls) for ls in ALL_LABEL_SETS] == [
            selectors.matches(b, ls) for ls in ALL_LABEL_SETS
        ]


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (sel(), sel(), True),
        (sel(matchLabels={"a": "1", "b": "2"}), sel(matchLabels={"b": "2", "a": "1"}), True),
        (sel(matchLabels={"a": "1"}), sel(matchExpressions=[req("a", "In", "1")]), True),
        (
            sel(matchExpressions=[req("a", "In", "1", "2"), req("b", "Exists")]),
            sel(matchExpressions=[req("b", "Exists"), req("a", "In", "2", "1")]),
            True,
        ),
        (sel(matchLabels={"a": "1"}), sel(matchLabels={"a": "2"}), False),
        (sel(matchLabels={"a": "1"}), sel(), False),
        (
            sel(matchExpressions=[req("a", "In", "1")]),
            sel(matchExpressions=[req("a", "NotIn", "1")]),
            False,
        ),
    ],
)
def test_selector_equality_ignores_order(
    a: LabelSelector, b: LabelSelector, expected: bool
) -> None:
    assert selectors.selectors_equal(a, b) is expected


def tol(**kwargs: Any) -> Toleration:
    return Toleration.model_validate(kwargs)


GPU = Taint("nvidia.com/gpu", TaintEffect.NO_SCHEDULE, "present")
UNSCHEDULABLE = Taint("node.kubernetes.io/unschedulable", TaintEffect.NO_SCHEDULE)
NOT_READY = Taint("node.kubernetes.io/not-ready", TaintEffect.NO_EXECUTE)


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        (tol(operator="Exists"), GPU, True),  # empty key + Exists tolerates everything
        (tol(operator="Exists"), NOT_READY, True),
        (tol(key="nvidia.com/gpu", operator="Exists"), GPU, True),
        (tol(key="nvidia.com/gpu", operator="Exists", effect="NoExecute"), GPU, False),
        (tol(key="nvidia.com/gpu", value="present"), GPU, True),  # default operator Equal
        (tol(key="nvidia.com/gpu", operator="Equal", value="absent"), GPU, False),
        (tol(key="nvidia.com/gpu", operator="Equal"), GPU, False),  # missing value is ""
        (tol(key="node.kubernetes.io/unschedulable", operator="Equal"), UNSCHEDULABLE, True),
        (
            tol(key="node.kubernetes.io/unschedulable", operator="Exists", effect="NoSchedule"),
            UNSCHEDULABLE,
            True,
        ),
        (tol(key="other", operator="Exists"), GPU, False),
        (tol(key="nvidia.com/gpu", operator="Exists", effect=""), GPU, True),  # empty effect: all
    ],
)
def test_toleration_matching_follows_kubernetes(
    toleration: Toleration, taint: Taint, expected: bool
) -> None:
    assert selectors.tolerates(toleration, taint) is expected


def test_untolerated_taints_keeps_input_order_and_drops_tolerated_ones() -> None:
    tolerations = [tol(key="node.kubernetes.io/unschedulable", operator="Exists")]
    assert selectors.untolerated_taints([GPU, UNSCHEDULABLE, NOT_READY], tolerations) == [
        GPU,
        NOT_READY,
    ]
    assert selectors.untolerated_taints([GPU], [tol(operator="Exists")]) == []
    assert selectors.untolerated_taints([GPU, NOT_READY], []) == [GPU, NOT_READY]


def test_a_taint_prints_like_kubectl() -> None:
    assert str(GPU) == "nvidia.com/gpu=present:NoSchedule"
    assert str(UNSCHEDULABLE) == "node.kubernetes.io/unschedulable:NoSchedule"
