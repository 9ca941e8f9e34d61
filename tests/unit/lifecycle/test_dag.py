"""The dependency graph between the packages of one CR."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lifecycle.dag import DependencyGraph
from lifecycle.errors import DependencyCycleError, UnknownDependencyError
from lifecycle.spec import Package


def graph(**deps: list[str]) -> DependencyGraph:
    return DependencyGraph(deps)


DIAMOND = graph(base=[], drivers=["base"], tuning=["base"], app=["drivers", "tuning"])


def test_levels_group_packages_by_depth() -> None:
    assert DIAMOND.levels() == [["base"], ["drivers", "tuning"], ["app"]]


def test_levels_place_a_package_after_its_deepest_dependency() -> None:
    g = graph(a=[], b=["a"], c=["b"], d=["a", "c"], e=[])
    assert g.levels() == [["a", "e"], ["b"], ["c"], ["d"]]


def test_an_empty_graph_has_no_levels() -> None:
    assert graph().levels() == []
    assert graph().ready(set()) == []


@pytest.mark.parametrize(
    ("complete", "expected"),
    [
        (set(), ["base"]),
        ({"base"}, ["drivers", "tuning"]),
        ({"base", "tuning"}, ["drivers"]),
        ({"base", "drivers", "tuning"}, ["app"]),
        ({"base", "drivers", "tuning", "app"}, []),
        # a root re-opened after its dependents completed is ready again (NodeWright's quirk 1)
        ({"drivers", "tuning", "app"}, ["base"]),
        # a package with two parents waits for both (NodeWright's quirk 2)
        ({"base", "drivers"}, ["tuning"]),
    ],
)
def test_ready_returns_incomplete_packages_whose_dependencies_are_complete(
    complete: set[str], expected: list[str]
) -> None:
    assert DIAMOND.ready(complete) == expected


@pytest.mark.parametrize(
    ("deps", "cycle"),
    [
        ({"a": ["a"]}, ["a", "a"]),
        ({"a": ["b"], "b": ["a"]}, ["a", "b", "a"]),
        ({"a": ["b"], "b": ["c"], "c": ["a"], "d": []}, ["a", "b", "c", "a"]),
        ({"x": [], "a": ["x", "b"], "b": ["c"], "c": ["b"]}, ["b", "c", "b"]),
    ],
)
def test_find_cycle_names_the_cycle(deps: dict[str, list[str]], cycle: list[str]) -> None:
    g = DependencyGraph(deps)
    assert g.find_cycle() == cycle
    with pytest.raises(DependencyCycleError, match=" -> ".join(cycle)):
        g.levels()


def test_packages_on_a_cycle_are_never_ready() -> None:
    g = graph(a=["b"], b=["a"], c=[])
    assert g.ready(set()) == ["c"]


def test_an_unknown_dependency_is_an_error() -> None:
    with pytest.raises(UnknownDependencyError, match="'app' depends on 'kernel'"):
        graph(app=["kernel"])


def test_the_graph_is_built_from_packages() -> None:
    packages = {
        "base": Package(version="1.0.0", image="x"),
        "app": Package(version="1.0.0", image="x", depends_on={"base": "1.0.0"}),
    }
    g = DependencyGraph.from_packages(packages)
    assert g.levels() == [["base"], ["app"]]
    assert g.dependencies("app") == ["base"] and g.dependents("base") == ["app"]
    assert g.names == ["app", "base"]


NAMES = [f"p{i}" for i in range(8)]


@st.composite
def acyclic(draw: st.DrawFn) -> dict[str, list[str]]:
    """Random DAGs: a package may only depend on packages earlier in a random order."""
    order = draw(st.permutations(NAMES))
    size = draw(st.integers(0, len(order)))
    names = order[:size]
    return {
        name: draw(st.lists(st.sampled_from(names[:i]), unique=True) if i else st.just([]))
        for i, name in enumerate(names)
    }


@given(acyclic())
def test_levels_respect_every_edge_and_cover_every_package(deps: dict[str, list[str]]) -> None:
    g = DependencyGraph(deps)
    assert g.find_cycle() is None
    level_of = {name: i for i, level in enumerate(g.levels()) for name in level}
    assert sorted(level_of) == sorted(deps)
    for name, on in deps.items():
        for dep in on:
            assert level_of[dep] < level_of[name]
        # each package sits right after its deepest dependency
        assert level_of[name] == max((level_of[d] + 1 for d in on), default=0)


@given(acyclic(), st.data())
def test_ready_packages_have_all_dependencies_complete(
    deps: dict[str, list[str]], data: st.DataObject
) -> None:
    g = DependencyGraph(deps)
    complete = set(data.draw(st.lists(st.sampled_from(NAMES)))) & set(deps)
    ready = g.ready(complete)
    assert ready == sorted(ready)
    for name, on in deps.items():
        expected = name not in complete and set(on) <= complete
        assert (name in ready) is expected


@given(acyclic())
def test_walking_ready_sets_completes_every_package_in_level_order(
    deps: dict[str, list[str]],
) -> None:
    g = DependencyGraph(deps)
    complete: set[str] = set()
    waves = []
    while ready := g.ready(complete):
        waves.append(ready)
        complete |= set(ready)
    assert complete == set(deps)
    assert waves == g.levels()


@given(st.dictionaries(st.sampled_from(NAMES), st.lists(st.sampled_from(NAMES), max_size=3)))
def test_a_reported_cycle_is_made_of_real_edges(deps: dict[str, list[str]]) -> None:
    deps = {n: [d for d in on if d in deps] for n, on in deps.items()}
    cycle = DependencyGraph(deps).find_cycle()
    if cycle is None:
        DependencyGraph(deps).levels()  # acyclic graphs always have levels
        return
    assert cycle[0] == cycle[-1]
    for a, b in itertools.pairwise(cycle):
        assert b in deps[a]
