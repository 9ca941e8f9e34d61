"""The dependency graph between the packages of one NodeWright (``dependsOn``).

Why not NodeWright's walk: its graph walk has order-dependent quirks (a re-opened root is never
returned again; a placeholder vertex may start before all its parents are done) and ignores
cycles. Here a package is ready exactly when all of its dependencies are complete, cycles are found
and named, and results are sorted so every caller sees the same order.

Vertices are package names: names are unique within a CR, and the spec validation already insists
that every ``dependsOn`` entry names a package of the same CR with exactly that version.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from lifecycle.errors import DependencyCycleError, UnknownDependencyError


class _HasDependsOn(Protocol):
    @property
    def depends_on(self) -> Mapping[str, str]: ...


class DependencyGraph:
    """Packages and their dependencies; an edge ``a -> b`` means ``a`` depends on ``b``.

    Raises:
        UnknownDependencyError: a dependency is not one of the packages.
    """

    __slots__ = ("_dependents", "_deps")

    def __init__(self, dependencies: Mapping[str, Iterable[str]]) -> None:
        deps = {name: frozenset(on) for name, on in dependencies.items()}
        for name in sorted(deps):
            for dep in sorted(deps[name]):
                if dep not in deps:
                    raise UnknownDependencyError(name, dep)
        self._deps: dict[str, frozenset[str]] = deps
        dependents: dict[str, set[str]] = {name: set() for name in deps}
        for name, on in deps.items():
            for dep in on:
                dependents[dep].add(name)
        self._dependents = {name: frozenset(d) for name, d in dependents.items()}

    @classmethod
    def from_packages(cls, packages: Mapping[str, _HasDependsOn]) -> DependencyGraph:
        """Build the graph from ``spec.packages``."""
        return cls({name: pkg.depends_on.keys() for name, pkg in packages.items()})

    @property
    def names(self) -> list[str]:
        """All package names, sorted."""
        return sorted(self._deps)

    def dependencies(self, name: str) -> list[str]:
        """Direct dependencies of ``name``, sorted."""
        return sorted(self._deps[name])

    def dependents(self, name: str) -> list[str]:
        """Packages that depend directly on ``name``, sorted."""
        return sorted(self._dependents[name])

    def find_cycle(self) -> list[str] | None:
        """One dependency cycle as ``[a, b, ..., a]``, or None when the graph is acyclic.

        Deterministic: the search starts from the smallest name and follows dependencies in name
        order, so the same spec always reports the same cycle.
        """
        done: set[str] = set()
        for start in self.names:
            if start in done:
                continue
            # Iterative DFS; ``path`` is the current chain, ``on_path`` its members.
            path: list[str] = [start]
            on_path = {start}
            stack = [iter(self.dependencies(start))]
            while stack:
                nxt = next(stack[-1], None)
                if nxt is None:
                    stack.pop()
                    finished = path.pop()
                    on_path.discard(finished)
                    done.add(finished)
                    continue
                if nxt in on_path:
                    return [*path[path.index(nxt) :], nxt]
                if nxt in done:
                    continue
                path.append(nxt)
                on_path.add(nxt)
                stack.append(iter(self.dependencies(nxt)))
        return None

    def levels(self) -> list[list[str]]:
        """Packages grouped by depth: level 0 = no dependencies, level n = deepest dependency n-1.

        Raises:
            DependencyCycleError: the graph has a cycle.
        """
        cycle = self.find_cycle()
        if cycle is not None:
            raise DependencyCycleError(cycle)
        depth: dict[str, int] = {}
        remaining = dict(self._deps)
        while remaining:
            placed = {
                name: max((depth[d] + 1 for d in deps), default=0)
                for name, deps in remaining.items()
                if all(d in depth for d in deps)
            }
            depth.update(placed)
            for name in placed:
                del remaining[name]
        out: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
        for name, level in depth.items():
            out[level].append(name)
        return [sorted(level) for level in out]

    def ready(self, complete: set[str] | frozenset[str]) -> list[str]:
        """Packages not yet complete whose dependencies are all complete, sorted by name.

        Packages on a cycle are never ready (validation rejects cycles before this matters).
        """
        return sorted(
            name for name, deps in self._deps.items() if name not in complete and deps <= complete
        )
